"""Durable waits: a run parks with only waits pending, and an event or a deadline wakes it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.agents import uid
from tests.waits_agents import EXECUTIONS, RELEASE, SLOW_STARTED, approvals, parent, sleeper
from tether import (
    BadEventPayload,
    RecordTooLarge,
    RunHeldElsewhere,
    Runtime,
    Status,
    Store,
    UnknownRun,
    UnknownWait,
    WaitCompleted,
)
from tether.blobs.local import LocalBlobStore
from tether.control.worker import Worker
from tether.foundation.ids import ROOT_ID, child_id, child_run_id
from tether.model.records import decode_log


async def work_until_finished(store: Store, run_id: str) -> None:
    """Run a worker (polling rarely: timers must wake it) until `run_id` finishes."""
    runtime = Runtime(store, owner="waker")
    finished = asyncio.Event()
    runtime.events.on_record(
        lambda rid, _seq, rec: (
            finished.set() if rid == run_id and rec.HasField("run_finished") else None
        )
    )
    worker = Worker(runtime, lease_ttl=5, poll=5.0)
    task = asyncio.create_task(worker.run())
    try:
        async with asyncio.timeout(30):
            await finished.wait()
    finally:
        worker.stop()
        await task


async def bodies(store: Store, run_id: str) -> list[str | None]:
    return [r.WhichOneof("body") for r in decode_log(run_id, await store.log.read_all(run_id))]


async def test_a_run_with_only_waits_pending_parks_and_an_event_completes_it(store: Store) -> None:
    rt = Runtime(store)
    run_id = uid("w")
    outcome = await rt.start(approvals, {"n": 1}, run_id=run_id)
    assert outcome.status is Status.WAITING
    assert outcome.reason == "waiting for approve-0"
    info = await store.runs.get(run_id)
    assert info is not None and info.status is Status.WAITING and info.lease_until is None
    assert (await bodies(store, run_id))[-1] == "run_waiting"
    assert run_id not in rt.executing  # nothing in this process holds it
    waits = outcome.graph.pending_waits()
    assert [w.key for w in waits] == ["approve-0"]
    assert waits[0].deadline_us == 0

    delivered = await rt.signal(run_id, "approve-0", {"approve": True}, event_id="e1")
    assert delivered.seq is not None and not delivered.duplicate
    info = await store.runs.get(run_id)
    assert info is not None and info.status is Status.QUEUED  # work is ready: any worker

    done = await rt.resume(run_id)
    assert done.status is Status.SUCCEEDED
    assert done.result == [[0, "done"]]
    assert EXECUTIONS[f"{run_id}:{child_id(ROOT_ID, 'act-0')}"] == 1


async def test_several_waits_are_answered_in_any_order_without_disturbing_each_other(
    store: Store,
) -> None:
    rt = Runtime(store)
    run_id = uid("w")
    assert (await rt.start(approvals, {"n": 3}, run_id=run_id)).status is Status.WAITING
    await rt.signal(run_id, "approve-2", {"approve": False, "reason": "no"})
    outcome = await rt.resume(run_id)
    assert outcome.status is Status.WAITING  # act-2 ran; approve-0 and approve-1 still open
    assert sorted(w.key for w in outcome.graph.pending_waits()) == ["approve-0", "approve-1"]
    await rt.signal(run_id, "approve-0", {"approve": True})
    await rt.signal(run_id, "approve-1", {"approve": True})
    outcome = await rt.resume(run_id)
    assert outcome.status is Status.SUCCEEDED
    assert outcome.result == [[0, "done"], [1, "done"], [2, "rejected"]]
    for i in range(3):
        assert EXECUTIONS[f"{run_id}:{child_id(ROOT_ID, f'act-{i}')}"] == 1


async def test_bad_events_are_refused_by_name_and_record_nothing(store: Store) -> None:
    rt = Runtime(store)
    run_id = uid("w")
    await rt.start(approvals, {"n": 2}, run_id=run_id)
    before = await store.log.read_all(run_id)
    epoch = (await store.runs.get(run_id)).epoch  # type: ignore[union-attr]

    with pytest.raises(UnknownRun, match="nope"):
        await rt.signal("nope", "approve-0", {"approve": True})
    with pytest.raises(UnknownWait, match=r"approve-9.*not buffered.*approve-0"):
        await rt.signal(run_id, "approve-9", {"approve": True})
    with pytest.raises(BadEventPayload, match=r"approve-0.*schema.*'approve' is a required"):
        await rt.signal(run_id, "approve-0", {"reason": "missing approve"})
    with pytest.raises(BadEventPayload, match=r"approve/?.*not of type 'boolean'"):
        await rt.signal(run_id, "approve-0", {"approve": "yes"})
    with pytest.raises(BadEventPayload, match="not JSON-serializable"):
        await rt.signal(run_id, "approve-0", {"approve": True, "x": object()})
    assert await store.log.read_all(run_id) == before
    info = await store.runs.get(run_id)
    assert info is not None and info.epoch == epoch and info.status is Status.WAITING

    first = await rt.signal(run_id, "approve-0", {"approve": True}, event_id="evt-1")
    again = await rt.signal(run_id, "approve-0", {"approve": True}, event_id="evt-1")
    assert again.duplicate and again.seq is None and not first.duplicate
    with pytest.raises(WaitCompleted, match="already completed by another event"):
        await rt.signal(run_id, "approve-0", {"approve": False}, event_id="evt-2")
    assert len(await store.log.read_all(run_id)) == len(before) + 1


async def test_an_event_for_a_run_executing_here_is_recorded_by_its_own_loop(
    store: Store,
) -> None:
    rt = Runtime(store)
    run_id = uid("w")
    RELEASE[run_id] = asyncio.Event()
    task = asyncio.create_task(rt.start(approvals, {"n": 1, "slow": True}, run_id=run_id))
    await SLOW_STARTED.setdefault(run_id, asyncio.Event()).wait()
    assert rt.executing[run_id].graph.open_waits  # recorded with the slow node's spawn
    delivered = await rt.signal(run_id, "approve-0", {"approve": True}, event_id="in-proc")
    assert delivered.status is Status.RUNNING and delivered.seq is not None
    RELEASE[run_id].set()
    outcome = await task
    assert outcome.status is Status.SUCCEEDED  # it never parked
    assert "run_waiting" not in await bodies(store, run_id)
    # A retry after the run finished is still the same event: a no-op, not an error.
    dup = await rt.signal(run_id, "approve-0", {"approve": True}, event_id="in-proc")
    assert dup.duplicate and dup.seq is None


async def test_a_timeout_completes_a_wait_as_timed_out_through_a_worker(
    durable_store: Store,
) -> None:
    store = durable_store
    rt = Runtime(store)
    run_id = uid("t")
    outcome = await rt.start(approvals, {"n": 1, "timeout": 0.3}, run_id=run_id)
    assert outcome.status is Status.WAITING
    assert outcome.graph.wake_at_us() > 0
    await work_until_finished(store, run_id)
    final = await rt.outcome(run_id)
    assert final.status is Status.SUCCEEDED
    assert final.result == [[0, "timed out"]]
    with pytest.raises(WaitCompleted, match="finished"):
        await rt.signal(run_id, "approve-0", {"approve": True})


async def test_a_durable_sleep_refuses_events_and_wakes_on_its_timer(durable_store: Store) -> None:
    store = durable_store
    rt = Runtime(store)
    run_id = uid("s")
    assert (await rt.start(sleeper, {"seconds": 0.3}, run_id=run_id)).status is Status.WAITING
    with pytest.raises(WaitCompleted, match="sleep"):
        await rt.signal(run_id, "nap", None)
    await work_until_finished(store, run_id)
    assert (await rt.outcome(run_id)).result == {"slept": True}


async def test_a_parked_run_without_a_deadline_is_never_claimed(durable_store: Store) -> None:
    rt = Runtime(durable_store)
    run_id = uid("p")
    await rt.start(approvals, {"n": 1}, run_id=run_id)
    assert await durable_store.leases.claim("someone", 100, 5) == []
    await rt.signal(run_id, "approve-0", {"approve": True})
    claims = await durable_store.leases.claim("someone", 100, 5)
    assert [c.run_id for c in claims] == [run_id]


async def test_the_same_event_delivered_concurrently_by_two_replicas_is_recorded_once(
    durable_store: Store,
) -> None:
    store = durable_store
    run_id = uid("r")
    await Runtime(store).start(approvals, {"n": 1}, run_id=run_id)
    before = len(await store.log.read_all(run_id))
    replicas = [Runtime(store, owner=f"replica-{i}") for i in range(4)]
    results = await asyncio.gather(
        *(rt.signal(run_id, "approve-0", {"approve": True}, event_id="same") for rt in replicas)
    )
    assert sum(not d.duplicate for d in results) == 1
    assert len(await store.log.read_all(run_id)) == before + 1
    outcome = await replicas[0].resume(run_id)
    assert outcome.result == [[0, "done"]]


async def test_a_10_mb_payload_goes_to_the_blob_store_or_is_refused_by_size(
    store: Store, tmp_path: Path
) -> None:
    big = {"approve": True, "reason": "x" * 10_000_000}
    run_id = uid("big")
    await Runtime(store).start(approvals, {"n": 1}, run_id=run_id)
    before = await store.log.read_all(run_id)
    with pytest.raises(RecordTooLarge, match="over the 65536-byte cap"):
        await Runtime(store).signal(run_id, "approve-0", big)  # no blob store: refused
    assert await store.log.read_all(run_id) == before
    async with LocalBlobStore(tmp_path / "blobs") as blobs:
        rt = Runtime(store, blobs=blobs)
        delivered = await rt.signal(run_id, "approve-0", big)
        assert delivered.seq is not None
        event = decode_log(run_id, await store.log.read_all(run_id))[delivered.seq]
        assert event.node_completed.output.blob.size > 10_000_000  # the record keeps a ref
        assert len(event.SerializeToString()) < 1024
        outcome = await rt.resume(run_id)
    assert outcome.status is Status.SUCCEEDED and outcome.result == [[0, "done"]]


async def test_a_timer_due_while_its_worker_drains_wakes_the_run_on_another_worker(
    durable_store: Store,
) -> None:
    store = durable_store
    run_id = uid("d")
    RELEASE[run_id] = asyncio.Event()
    # A run with a 0.5 s timeout and a slow sibling keeps executing on worker A past the
    # deadline: A records the timeout itself unless it is draining, as it is here.
    first = Runtime(store, owner="draining", grace=30)
    worker = Worker(first, lease_ttl=5, poll=0.05)
    await first.submit(approvals, {"n": 1, "timeout": 0.5, "slow": True}, run_id=run_id)
    task = asyncio.create_task(worker.run())
    await SLOW_STARTED.setdefault(run_id, asyncio.Event()).wait()
    worker.stop()  # drain: no more launching, no timeout recorded; the slow node finishes
    await asyncio.sleep(0.7)  # the deadline passes during the drain (not a synchronisation)
    RELEASE[run_id].set()
    await task
    info = await store.runs.get(run_id)
    assert info is not None and info.status is Status.PAUSED and info.reason == "drain"
    await work_until_finished(store, run_id)  # worker B: claims the drained run
    outcome = await Runtime(store).outcome(run_id)
    assert outcome.status is Status.SUCCEEDED and outcome.result == [[0, "timed out"]]
    resumed = [r.run_resumed.owner for r in decode_log(run_id, await store.log.read_all(run_id))
               if r.HasField("run_resumed")]  # fmt: skip
    assert resumed[-1] == "waker"


async def test_an_event_for_a_run_another_process_executes_waits_for_it_to_park(
    durable_store: Store,
) -> None:
    store = durable_store
    run_id = uid("h")
    RELEASE[run_id] = asyncio.Event()
    owner = Runtime(store, owner="owner")  # stands for another process: its own executing map
    task = asyncio.create_task(owner.start(approvals, {"n": 1, "slow": True}, run_id=run_id))
    await SLOW_STARTED.setdefault(run_id, asyncio.Event()).wait()
    other = Runtime(store, owner="replica")
    before = await store.log.read_all(run_id)
    with pytest.raises(RunHeldElsewhere, match=r"did not park within 0.3s; nothing was recorded"):
        await other.signal(run_id, "approve-0", {"approve": True}, wait_s=0.3)
    assert await store.log.read_all(run_id) == before
    delivery = asyncio.create_task(other.signal(run_id, "approve-0", {"approve": True}))
    RELEASE[run_id].set()  # the slow node finishes; the run parks; the delivery lands then
    parked = await task
    assert parked.status is Status.WAITING
    delivered = await delivery
    assert delivered.seq is not None and delivered.status is Status.QUEUED
    assert (await other.resume(run_id)).result == [[0, "done"]]


async def test_a_sub_agent_runs_waits_park_its_parent_and_an_event_for_it_resumes_both(
    store: Store,
) -> None:
    rt = Runtime(store)
    run_id = uid("p")
    outcome = await rt.start(parent, {"n": 2}, run_id=run_id)
    child = child_run_id(run_id, ROOT_ID)
    assert outcome.status is Status.WAITING
    assert outcome.reason == f"waiting for {child}/approve-0, {child}/approve-1"
    with pytest.raises(UnknownWait):
        await rt.signal(run_id, "approve-0", {"approve": True})  # the child's, not the parent's
    delivered = await rt.signal(child, "approve-0", {"approve": True}, event_id="c0")
    assert delivered.seq is not None and delivered.status is Status.QUEUED
    again = await rt.signal(child, "approve-0", {"approve": True}, event_id="c0")
    assert again.duplicate
    still = await rt.resume(run_id)  # the child continues, then parks on approve-1 again
    assert still.status is Status.WAITING and still.reason == f"waiting for {child}/approve-1"
    await rt.signal(child, "approve-1", {"approve": False})
    done = await rt.resume(run_id)
    assert done.status is Status.SUCCEEDED
    assert done.result == {"child": [[0, "done"], [1, "rejected"]]}
    assert EXECUTIONS[f"{run_id}:{child_id(ROOT_ID, 'act-0')}"] == 0  # ran in the child run
    assert EXECUTIONS[f"{child}:{child_id(ROOT_ID, 'act-0')}"] == 1


async def test_a_sub_agent_runs_timer_wakes_its_parent_through_a_worker(
    durable_store: Store,
) -> None:
    store = durable_store
    rt = Runtime(store)
    run_id = uid("pt")
    await rt.submit(parent, {"n": 1, "timeout": 0.4}, run_id=run_id)
    await work_until_finished(store, run_id)
    outcome = await rt.outcome(run_id)
    assert outcome.status is Status.SUCCEEDED
    assert outcome.result == {"child": [[0, "timed out"]]}
    parked = [r for r in decode_log(run_id, await store.log.read_all(run_id))
              if r.HasField("run_waiting")]  # fmt: skip
    assert parked and parked[0].run_waiting.wake_at_us > 0
