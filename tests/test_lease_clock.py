"""One clock for leases: the database's, whatever each worker's clock says.

A worker whose clock is 30 s ahead (this process's clock moved by `tests.clock.skewed`, as a
host's clock set wrong would read: `time.time` and `tether.foundation.clock`) must never
take a run whose lease is live by the database's clock. It claims the other runs as any
worker does, and the run itself once its lease has run out by the database's clock. On
PostgreSQL the database's clock is the server's; on SQLite it is the host's, as SQLite
reads it (`store/sqlite/dbtime.py`), which a Python-level offset does not move.
"""

from __future__ import annotations

import asyncio

from tests.agents import uid
from tests.clock import skewed
from tether import Context, Node, Registry, Runtime, Status
from tether.control.worker import Worker
from tether.store import RunFilter, Store

AHEAD_S = 30.0
LEASE_S = 20.0  # live for 20 s by the database's clock: run out by the skewed worker's


async def _finished(store: Store, run_id: str) -> None:
    """Wait until the run's row says it finished (bounded)."""
    for _ in range(3000):
        info = await store.runs.get(run_id)
        if info is not None and info.status.finished:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"run {run_id} did not finish: {info}")


async def test_a_worker_whose_clock_is_ahead_never_takes_a_live_lease(
    durable_store: Store,
) -> None:
    agent = Registry(uid("test.lease_clock"), entry="only")

    @agent.node("only")
    async def only(ctx: Context, node: Node) -> str:
        return ctx.run_id

    store = durable_store
    here = Runtime(store, owner="holder")
    await here.submit(agent, run_id="held")
    claim = await store.leases.take("held", "holder", LEASE_S)  # by the database's clock
    assert claim is not None
    await here.submit(agent, run_id="other")  # queued: the skewed worker's claims take it

    with skewed(AHEAD_S):
        worker = Worker(Runtime(store, owner="ahead"), lease_ttl=5, poll=0.05)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(worker.run())
            # Its claims ran (it took and finished the other run) and left the held one.
            await _finished(store, "other")
            info = await store.runs.get("held")
            assert info is not None
            assert (info.owner, info.epoch, info.status) == ("holder", claim.epoch, Status.RUNNING)
            orphaned = await store.runs.list(where=RunFilter(orphaned=True))
            assert "held" not in {r.run_id for r in orphaned}
            # Its lease runs out by the database's clock (the holder lets it go): now taken.
            await store.leases.renew("holder", [claim], 0.0)
            await _finished(store, "held")
            worker.stop()
    info = await store.runs.get("held")
    assert info is not None and info.status is Status.SUCCEEDED and info.epoch == claim.epoch + 1
    assert worker.statistics()["claimed"] == 2


async def test_a_lease_taken_and_renewed_by_a_worker_whose_clock_is_behind_lasts_its_ttl(
    durable_store: Store,
) -> None:
    agent = Registry(uid("test.lease_clock"), entry="only")

    @agent.node("only")
    async def only(ctx: Context, node: Node) -> str:
        return ctx.run_id

    store = durable_store
    here = Runtime(store, owner="holder")
    await here.submit(agent, run_id="held")
    await here.submit(agent, run_id="other")
    with skewed(-AHEAD_S):  # the holder's clock is 30 s behind: it sets the lease all the same
        claim = await store.leases.take("held", "holder", LEASE_S)
        assert claim is not None
        assert (await store.leases.renew("holder", [claim], LEASE_S)).lost == []
    now = await store.runs.clock()
    info = await store.runs.get("held")
    assert info is not None and info.lease_until is not None
    assert LEASE_S - 5 < info.lease_until - now <= LEASE_S  # by the database's clock
    worker = Worker(Runtime(store, owner="right"), lease_ttl=5, poll=0.05)
    async with asyncio.TaskGroup() as tg:
        tg.create_task(worker.run())
        await _finished(store, "other")
        worker.stop()
    info = await store.runs.get("held")
    assert info is not None
    assert (info.owner, info.epoch, info.status) == ("holder", claim.epoch, Status.RUNNING)
