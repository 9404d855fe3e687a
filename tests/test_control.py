"""One owner per run, whatever started it (issue 10): leases for in-process runs, resume
refused on a live lease, takeover by force, adoption of orphaned runs, cancel through the
store. Every backend; the process-level cases (SIGKILL, two CLIs) are in test_cli_control.py.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from tests.agents import uid
from tether import Context, Node, NodeResult, Registry, Runtime, Spawn, StaleEpoch, Status, Store
from tether.control.actions import cancel, requeue, resume
from tether.foundation.errors import RunBusy
from tether.model.records import decode_log

gated = Registry("test.gated", entry="root")
GATE: dict[str, asyncio.Event] = {}
STARTED: dict[str, asyncio.Event] = {}
RUNS: Counter[str] = Counter()


def gate(run_id: str) -> asyncio.Event:
    return GATE.setdefault(run_id, asyncio.Event())


def started(run_id: str) -> asyncio.Event:
    return STARTED.setdefault(run_id, asyncio.Event())


@gated.node("root")
async def gated_root(ctx: Context, node: Node) -> NodeResult:
    return NodeResult(None, spawn=[Spawn("leaf", {"i": i}, key=str(i)) for i in range(2)])


@gated.node("leaf")
async def gated_leaf(ctx: Context, node: Node) -> NodeResult:
    RUNS[ctx.idempotency_key] += 1
    started(ctx.run_id).set()
    await gate(ctx.run_id).wait()
    return NodeResult(node.input["i"], is_result=node.input["i"] == 1)


async def node_ids(store: Store, run_id: str) -> list[str]:
    records = decode_log(run_id, await store.log.read_all(run_id))
    return [r.node_completed.node_id for r in records if r.HasField("node_completed")]


async def test_an_in_process_run_is_owned_under_a_renewed_lease(store: Store) -> None:
    run_id = uid("owned")
    # Renewed every 0.5 s: a stall of a second on a loaded host does not let it run out.
    rt = Runtime(store, lease_ttl=1.5)
    task = asyncio.create_task(rt.start(gated, run_id=run_id))
    await started(run_id).wait()
    first = await store.runs.get(run_id)
    assert first is not None and first.owner == rt.owner and first.epoch == 1
    assert first.lease_until is not None
    # The heartbeat renews it: after more than a lease, it is still live, not orphaned.
    await asyncio.sleep(2.0)
    info = await store.runs.get(run_id)
    assert info is not None and info.lease_until is not None
    assert info.state(await store.runs.clock()) == "running"
    assert info.lease_until > first.lease_until
    gate(run_id).set()
    outcome = await task
    assert outcome.status is Status.SUCCEEDED
    info = await store.runs.get(run_id)
    assert info is not None and info.owner is None and info.lease_until is None


async def test_resume_is_refused_while_the_owner_is_live_and_executes_nothing(
    store: Store,
) -> None:
    run_id = uid("busy")
    owner = Runtime(store, lease_ttl=30.0, owner="first-owner")
    task = asyncio.create_task(owner.start(gated, run_id=run_id))
    await started(run_id).wait()
    before = await store.log.read_all(run_id)
    other = Runtime(store, owner="second-owner")
    with pytest.raises(RunBusy, match=r"by first-owner, lease \d+\.\ds left") as busy:
        await other.resume(run_id)
    assert busy.value.owner == "first-owner"
    assert busy.value.lease_left is not None and 0 < busy.value.lease_left <= 30.0
    with pytest.raises(RunBusy):  # the API's resume (requeue) says the same
        await requeue(other, run_id, budget=None, ttl=5.0)
    assert await store.log.read_all(run_id) == before
    gate(run_id).set()
    assert (await task).status is Status.SUCCEEDED


async def test_resume_force_fences_the_live_owner_and_each_node_is_recorded_once(
    store: Store,
) -> None:
    run_id = uid("force")
    owner = Runtime(store, lease_ttl=30.0, owner="old-owner")
    task = asyncio.create_task(owner.start(gated, run_id=run_id))
    await started(run_id).wait()
    taker = Runtime(store, owner="new-owner")
    resumed = asyncio.create_task(resume(taker, run_id, force=True))
    info = None
    while info is None or info.owner != "new-owner":
        info = await store.runs.get(run_id)
        await asyncio.sleep(0.01)
    assert info.epoch == 2
    gate(run_id).set()  # both owners' leaves complete now; only the new owner's land
    with pytest.raises(StaleEpoch):
        await task
    outcome = await resumed
    assert outcome.status is Status.SUCCEEDED
    ids = await node_ids(store, run_id)
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 3


async def test_resume_wait_takes_the_run_once_the_owner_lets_it_go(store: Store) -> None:
    run_id = uid("wait")
    owner = Runtime(store, lease_ttl=30.0, owner="first-owner")
    task = asyncio.create_task(owner.start(gated, run_id=run_id))
    await started(run_id).wait()
    waits: list[RunBusy] = []
    refused = asyncio.Event()

    def on_wait(busy: RunBusy) -> None:
        waits.append(busy)
        refused.set()

    waiter = asyncio.create_task(
        resume(Runtime(store, owner="waiter"), run_id, wait=True, on_wait=on_wait)
    )
    await refused.wait()
    task.cancel()  # the owner stops without a pause record and lets its lease go
    with pytest.raises(asyncio.CancelledError):
        await task
    gate(run_id).set()
    outcome = await waiter
    assert outcome.status is Status.SUCCEEDED
    assert waits[0].owner == "first-owner"


async def test_an_orphaned_in_process_run_is_adopted_by_a_worker(store: Store) -> None:
    from tether.control.worker import Worker

    run_id = uid("orphan")
    # A process that recorded the run's start and died: its lease runs out, unrenewed.
    # Long enough to be live still when the resume below asks (had it run out, that resume
    # would take the run and wait on the gate); short enough to wait out.
    dead = Runtime(store, lease_ttl=2.0, owner="dead-owner")
    await dead.create(gated, run_id=run_id, status=Status.RUNNING)
    info = await store.runs.get(run_id)
    assert info is not None and info.owner == "dead-owner" and info.lease_until is not None
    with pytest.raises(RunBusy):
        await Runtime(store, owner="someone").resume(run_id)
    async with asyncio.timeout(10):  # the lease runs out: inherent to the test
        while info.state(await store.runs.clock()) != "orphaned":
            await asyncio.sleep(0.1)
            info = await store.runs.get(run_id)
            assert info is not None and info.owner == "dead-owner"
    gate(run_id).set()
    worker = Worker(Runtime(store, owner="worker"), lease_ttl=5.0, poll=0.05)
    running = asyncio.create_task(worker.run())
    info = await store.runs.get(run_id)
    while info is not None and not info.status.finished:
        await asyncio.sleep(0.05)
        info = await store.runs.get(run_id)
    worker.stop()
    await running
    assert info is not None and info.status is Status.SUCCEEDED
    assert worker.statistics()["claimed"] == 1


async def test_the_api_resume_requeues_an_orphaned_run(store: Store) -> None:
    run_id = uid("requeue")
    dead = Runtime(store, lease_ttl=0.2, owner="dead-owner")
    await dead.create(gated, run_id=run_id, status=Status.RUNNING)
    await asyncio.sleep(0.3)  # the lease runs out: inherent to the test
    server = Runtime(store, owner="server")
    assert (
        await requeue(server, run_id, budget={"max_nodes": (10, False)}, ttl=5.0) is Status.QUEUED
    )
    info = await store.runs.get(run_id)
    assert info is not None and info.status is Status.QUEUED and info.owner is None


async def test_a_cancel_through_the_store_reaches_an_in_process_owner(store: Store) -> None:
    run_id = uid("cancel")
    owner = Runtime(store, lease_ttl=1.5, owner="owner")  # renewed and asked every 0.5 s
    task = asyncio.create_task(owner.start(gated, run_id=run_id))
    await started(run_id).wait()
    status = await cancel(Runtime(store, owner="cli"), run_id, ttl=5.0)
    assert status is Status.RUNNING  # flagged; the owner's heartbeat passes it on
    outcome = await task
    assert outcome.status is Status.CANCELLED
    info = await store.runs.get(run_id)
    assert info is not None and info.status is Status.CANCELLED and info.owner is None


async def test_the_api_resume_of_a_run_with_a_live_owner_is_a_409_naming_it(
    sqlite_store: Store,
) -> None:
    from tests.server.kit import TOKEN, running
    from tether.client import ApiError, TetherClient

    run_id = uid("api-busy")
    owner = Runtime(sqlite_store, lease_ttl=30.0, owner="first-owner")
    task = asyncio.create_task(owner.start(gated, run_id=run_id))
    await started(run_id).wait()
    async with (
        running(sqlite_store, agents=(), workers="external") as (url, server),
        TetherClient(url, TOKEN) as client,
    ):
        with pytest.raises(ApiError) as err:
            await client.resume(run_id)
        opaque = server.publish.owner_id("first-owner")
    assert err.value.status == 409
    assert f"is running by {opaque}, lease " in str(err.value) and "s left" in str(err.value)
    assert "first-owner" not in str(err.value)  # owners stay opaque outside the server
    gate(run_id).set()
    assert (await task).status is Status.SUCCEEDED
