"""Events delivered at once to one wait: exactly one completes it, whatever the run is doing.

Fifty signals race for one wait, against a run executing in this process (a slow sibling
keeps its loop busy) and against a parked run; some share an event id, some do not. One is
recorded; a repeat of the recorded event is a duplicate; any other event is refused as
already answered. The log then loads and replays.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.agents import uid
from tests.waits_agents import RELEASE, SLOW_STARTED, approvals
from tether import Runtime, Status, Store, WaitCompleted
from tether.engine.delivery import Delivered
from tether.model.records import decode_log

SENDERS = 50


def ids_for(round_: int) -> list[str]:
    """Half the senders repeat one event id, the rest send events of their own."""
    return [f"shared-{round_}" if i % 2 else f"own-{round_}-{i}" for i in range(SENDERS)]


async def race(rt: Runtime, run_id: str, event_ids: list[str]) -> list[Delivered | BaseException]:
    return await asyncio.gather(
        *(
            rt.signal(run_id, "approve-0", {"approve": True}, event_id=eid, wait_s=30)
            for eid in event_ids
        ),
        return_exceptions=True,
    )


def judge(results: list[Delivered | BaseException], event_ids: list[str]) -> None:
    """One delivery recorded; repeats of its event id are duplicates; the rest refused."""
    recorded = [i for i, r in enumerate(results) if isinstance(r, Delivered) and not r.duplicate]
    assert len(recorded) == 1, results
    winner = event_ids[recorded[0]]
    for eid, result in zip(event_ids, results, strict=True):
        if result is results[recorded[0]]:
            continue
        if eid == winner:
            assert isinstance(result, Delivered) and result.duplicate, result
        else:
            assert isinstance(result, WaitCompleted), result
            assert "already completed" in str(result) or "already answered" in str(result)


async def completions_of_the_wait(store: Store, run_id: str) -> int:
    log = decode_log(run_id, await store.log.read_all(run_id))
    return sum(
        1 for r in log if r.HasField("node_completed") and r.node_completed.wait.key == "approve-0"
    )


@pytest.mark.parametrize("round_", range(3))
async def test_concurrent_events_to_an_executing_run_record_one_completion(
    store: Store, round_: int
) -> None:
    rt = Runtime(store)
    run_id = uid("x")
    RELEASE[run_id] = asyncio.Event()
    started = SLOW_STARTED.setdefault(run_id, asyncio.Event())
    run = asyncio.create_task(rt.start(approvals, {"n": 1, "slow": True}, run_id=run_id))
    await asyncio.wait_for(started.wait(), 30)
    assert run_id in rt.executing  # the deliveries go to its loop, not through the store
    event_ids = ids_for(round_)
    judge(await race(rt, run_id, event_ids), event_ids)
    RELEASE[run_id].set()
    outcome = await asyncio.wait_for(run, 30)
    assert outcome.status is Status.SUCCEEDED and outcome.result == [[0, "done"]]
    assert await completions_of_the_wait(store, run_id) == 1
    loaded = await Runtime(store).load(run_id)  # the log replays
    assert loaded.status is Status.SUCCEEDED


@pytest.mark.parametrize("round_", range(3))
async def test_concurrent_events_to_a_parked_run_from_several_replicas_record_one(
    store: Store, round_: int
) -> None:
    run_id = uid("p")
    assert (await Runtime(store).start(approvals, {"n": 1}, run_id=run_id)).status is (
        Status.WAITING
    )
    replicas = [Runtime(store, owner=f"replica-{i}") for i in range(5)]
    event_ids = ids_for(round_)
    results = await asyncio.gather(
        *(
            replicas[i % len(replicas)].signal(
                run_id, "approve-0", {"approve": True}, event_id=eid, wait_s=30
            )
            for i, eid in enumerate(event_ids)
        ),
        return_exceptions=True,
    )
    judge(results, event_ids)
    assert await completions_of_the_wait(store, run_id) == 1
    outcome = await replicas[0].resume(run_id)
    assert outcome.status is Status.SUCCEEDED and outcome.result == [[0, "done"]]
    assert (await Runtime(store).load(run_id)).status is Status.SUCCEEDED
