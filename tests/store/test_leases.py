"""Leases on every backend: what is runnable, epochs, renewals, fenced releases and statuses."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.clock import ManualClock
from tether.foundation import clock as tether_clock
from tether.foundation.errors import ConflictingRecord, StaleEpoch
from tether.store import DRAIN, Claim, Renewal, RunInfo, Status, Store


@pytest.fixture(autouse=True)
def clock() -> Iterator[ManualClock]:
    # Runs are created a second apart on this clock (their creation time orders claims).
    with tether_clock.use(ManualClock()) as manual:
        yield manual


async def add(store: Store, run_id: str, status: Status, **kw: object) -> None:
    tether_clock.current().advance(1.0)  # type: ignore[attr-defined]
    await store.runs.create(RunInfo(run_id=run_id, agent="a", status=status, **kw), b"0")  # type: ignore[arg-type]


async def test_only_runnable_top_level_runs_are_claimed(store: Store) -> None:
    await add(store, "queued", Status.QUEUED)
    await add(store, "budget", Status.QUEUED)
    await store.runs.set_status("budget", Status.PAUSED, reason="budget: node limit 3 reached")
    await add(store, "drained", Status.QUEUED)
    await store.runs.set_status("drained", Status.PAUSED, reason=DRAIN)
    await add(store, "done", Status.SUCCEEDED)
    await add(store, "child", Status.QUEUED, parent_run_id="queued")
    await add(store, "local", Status.RUNNING)  # `tether demo`: running without a lease
    claims = await store.leases.claim("w1", 10, 5.0)
    assert claims == [Claim("queued", 1), Claim("drained", 1)]
    info = await store.runs.get("queued")
    assert info is not None and info.owner == "w1" and info.status is Status.RUNNING
    assert info.lease_until is not None
    assert await store.leases.claim("w2", 10, 5.0) == []  # leased, not expired


async def test_an_expired_lease_is_claimed_at_a_new_epoch(store: Store) -> None:
    await add(store, "r", Status.QUEUED)
    # A lease that has run out on arrival: PostgreSQL times leases by its own clock, so
    # a negative ttl rather than a clock moved by the test is what makes it expired.
    [first] = await store.leases.claim("w1", 1, -1.0)
    [second] = await store.leases.claim("w2", 1, 5.0)
    assert (first.epoch, second.epoch) == (1, 2)
    assert await store.leases.renew("w1", [first], 5.0) == Renewal(["r"], [])
    assert await store.leases.renew("w2", [second], 5.0) == Renewal([], [])
    with pytest.raises(StaleEpoch):
        await store.log.append("r", [(1, b"late")], epoch=first.epoch)
    with pytest.raises(StaleEpoch):
        await store.runs.set_status("r", Status.FAILED, epoch=first.epoch)
    assert not await store.leases.release("r", first.epoch, Status.SUCCEEDED)
    assert await store.leases.release("r", second.epoch, Status.PAUSED, DRAIN)
    info = await store.runs.get("r")
    assert info is not None and info.owner is None and info.reason == DRAIN
    assert await store.leases.claim("w3", 5, 5.0) == [Claim("r", 3)]  # drained: runnable


async def test_a_renewal_racing_a_release_gives_the_run_no_lease_back(store: Store) -> None:
    await add(store, "r", Status.QUEUED)
    [claim] = await store.leases.claim("w1", 1, 5.0)
    # The heartbeat took its list of held runs, then the run was released paused.
    assert await store.leases.release("r", claim.epoch, Status.PAUSED, "budget: node limit")
    assert await store.leases.renew("w1", [claim], 5.0) == Renewal(["r"], [])
    info = await store.runs.get("r")
    assert info is not None and info.lease_until is None and info.owner is None
    # So it can be taken (resumed with a larger budget) at once.
    assert await store.leases.take("r", "server", 5.0) == Claim("r", claim.epoch + 1)


async def test_a_child_is_adopted_only_under_its_parents_epoch(store: Store) -> None:
    await add(store, "p", Status.QUEUED)
    await add(store, "p.c", Status.RUNNING, parent_run_id="p")
    [claim] = await store.leases.claim("w1", 1, 5.0)
    assert await store.leases.adopt_child("p.c", "w1", "p", claim.epoch) == 1
    with pytest.raises(StaleEpoch):
        await store.leases.adopt_child("p.c", "w0", "p", claim.epoch - 1)
    with pytest.raises(StaleEpoch):  # the child's old epoch is fenced off too
        await store.log.append("p.c", [(1, b"x")], epoch=0)
    await store.log.append("p.c", [(1, b"x")], epoch=1)


async def test_take_claims_one_named_run_nobody_holds(store: Store) -> None:
    await add(store, "budget", Status.QUEUED)
    await store.runs.set_status("budget", Status.PAUSED, reason="budget: node limit 3 reached")
    await add(store, "held", Status.QUEUED)
    await add(store, "done", Status.SUCCEEDED)
    await add(store, "child", Status.QUEUED, parent_run_id="held")
    [held] = await store.leases.claim("w1", 1, 5.0)  # "budget" is not claimable: "held" is
    assert held.run_id == "held"
    # Unlike claim, take gets a run paused for its budget (the server resumes it so).
    assert await store.leases.take("budget", "server", 5.0) == Claim("budget", 1)
    for run_id in ("held", "done", "child", "missing"):
        assert await store.leases.take(run_id, "server", 5.0) is None
    assert await store.leases.release("budget", 1, Status.QUEUED)
    assert await store.leases.take("budget", "server", 5.0) == Claim("budget", 2)


async def test_a_forced_take_raises_the_epoch_and_fences_the_holder(store: Store) -> None:
    await add(store, "live", Status.QUEUED)
    [held] = await store.leases.claim("w1", 1, 60.0)
    assert held == Claim("live", 1)
    assert await store.leases.take("live", "server", 5.0) is None  # live: not without force
    taken = await store.leases.take("live", "server", 5.0, force=True)
    assert taken == Claim("live", 2)  # a new epoch: the old holder is fenced off
    renewal = await store.leases.renew("w1", [held], 60.0)
    assert list(renewal.lost) == ["live"]
    assert not await store.leases.release("live", 1, Status.QUEUED)  # the old epoch: refused
    info = await store.runs.get("live")
    assert info is not None and info.owner == "server" and info.epoch == 2


async def test_a_cancel_request_reaches_the_holder_and_the_next_claim(store: Store) -> None:
    await add(store, "a", Status.QUEUED)
    await add(store, "b", Status.QUEUED)
    await add(store, "done", Status.SUCCEEDED)
    held = await store.leases.claim("w1", 1, 5.0)
    assert await store.leases.request_cancel("a") is Status.RUNNING
    assert await store.leases.request_cancel("b") is Status.QUEUED
    assert await store.leases.request_cancel("done") is Status.SUCCEEDED
    assert await store.leases.request_cancel("missing") is None
    # The holder learns of it from its next renewal, the same round trip that extends it.
    assert await store.leases.renew("w1", held, 5.0) == Renewal([], ["a"])
    assert await store.leases.renew("w1", [Claim("a", held[0].epoch + 1)], 5.0) == Renewal(
        ["a"], []
    )
    [b] = await store.leases.claim("w2", 1, 5.0)
    assert b == Claim("b", 1, cancel=True)


async def test_a_finish_appends_sets_the_status_and_releases_in_one_transaction(
    store: Store,
) -> None:
    # Fenced off: neither the record lands nor the row changes.
    await store.runs.create(RunInfo(run_id="g", agent="a", status=Status.QUEUED), b"0")
    [claim] = await store.leases.claim("w2", 1, 5.0)
    with pytest.raises(StaleEpoch):
        await store.leases.release("g", claim.epoch - 1, Status.SUCCEEDED, final=(1, b"end"))
    info = await store.runs.get("g")
    assert info is not None and info.status is Status.RUNNING and info.owner == "w2"
    assert await store.log.read("g") == [(0, b"0")]
    # A different record at the seq: a conflict, nothing changes either.
    await store.log.append("g", [(1, b"node")], epoch=claim.epoch)
    with pytest.raises(ConflictingRecord):
        await store.leases.release("g", claim.epoch, Status.SUCCEEDED, final=(1, b"end"))
    info = await store.runs.get("g")
    assert info is not None and info.status is Status.RUNNING and info.owner == "w2"
    # The finish: record, status and release together; its retry is a no-op.
    assert await store.leases.release("g", claim.epoch, Status.FAILED, "boom", final=(2, b"end"))
    assert await store.log.read("g", after_seq=1) == [(2, b"end")]
    info = await store.runs.get("g")
    assert info is not None and (info.status, info.reason, info.owner) == (
        Status.FAILED,
        "boom",
        None,
    )
    assert info.lease_until is None
    assert await store.leases.release("g", claim.epoch, Status.FAILED, "boom", final=(2, b"end"))
    # A run nobody leased (epoch None) finishes the same way.
    await store.runs.create(RunInfo(run_id="h", agent="a", status=Status.RUNNING), b"0")
    assert await store.leases.release("h", None, Status.SUCCEEDED, final=(1, b"end"))
    info = await store.runs.get("h")
    assert info is not None and info.status is Status.SUCCEEDED
    assert await store.log.read("h") == [(0, b"0"), (1, b"end")]
