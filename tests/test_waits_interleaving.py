"""Any interleaving of deliveries, completions and a crash leaves a log that replays (issue
38): each wait is completed once, whatever arrives together, twice, or across a crash.

A run asks for several approvals and keeps a slow sibling in flight, so it executes while
events arrive. Hypothesis draws the deliveries (which wait, which event id, repeats and
strangers included), how they are grouped into concurrent bursts, and whether the process
executing the run dies between two bursts (its task cancelled: in-flight nodes unrecorded,
the lease given up) and another runtime takes the run over. The log then loads, every
wait is completed exactly once, and the run finishes with every answer it recorded.
"""

from __future__ import annotations

import asyncio
import contextlib

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.agents import uid
from tests.waits_agents import RELEASE, SLOW_STARTED, approvals
from tether import Runtime, Status, Store, UnknownWait, WaitCompleted
from tether.engine.delivery import Delivered
from tether.model.records import decode_log
from tether.store import store_from_url

WAITS = 3

deliveries = st.lists(
    st.tuples(st.integers(0, WAITS - 1), st.sampled_from(["a", "b", "c", ""])),
    min_size=1,
    max_size=12,
)


async def scenario(url: str, sent: list[tuple[int, str]], bursts: list[int], crash: int) -> None:
    async with store_from_url(url) as store:
        await play(store, sent, bursts, crash)


async def play(store: Store, sent: list[tuple[int, str]], bursts: list[int], crash: int) -> None:
    run_id = uid("i")
    RELEASE[run_id] = asyncio.Event()
    started = SLOW_STARTED.setdefault(run_id, asyncio.Event())
    first = Runtime(store, owner="first")
    run = asyncio.create_task(first.start(approvals, {"n": WAITS, "slow": True}, run_id=run_id))
    await asyncio.wait_for(started.wait(), 30)
    rt, answers = first, []
    queue = list(sent)
    for i, size in enumerate(bursts):
        if i == crash and not run.done():
            run.cancel()  # the process dies: what was in flight is not recorded
            await asyncio.gather(run, return_exceptions=True)
            rt = Runtime(store, owner="second")
            RELEASE[run_id].set()  # the slow node runs again, and finishes this time
            run = asyncio.create_task(rt.resume(run_id, force=True))
        burst, queue = queue[:size], queue[size:]
        answers += await asyncio.gather(
            *(
                rt.signal(
                    run_id,
                    f"approve-{w}",
                    {"approve": True},
                    event_id=f"{eid}{w}" if eid else "",
                    wait_s=30,
                )
                for w, eid in burst
            ),
            return_exceptions=True,
        )
    for answer in answers:  # recorded, a repeat, or refused as answered: nothing else
        assert isinstance(answer, Delivered | WaitCompleted | UnknownWait), answer
    # Every wait answered (those no burst reached, now), then the run goes to its end.
    for w in range(WAITS):
        with contextlib.suppress(WaitCompleted):
            await rt.signal(run_id, f"approve-{w}", {"approve": True}, event_id=f"late{w}")
    RELEASE[run_id].set()
    outcome = await asyncio.wait_for(run, 30)
    if outcome.status is Status.WAITING:  # parked before the last answers: take it up
        outcome = await Runtime(store, owner="third").resume(run_id)
    assert outcome.status is Status.SUCCEEDED, outcome
    assert outcome.result == [[w, "done"] for w in range(WAITS)]
    log = decode_log(run_id, await store.log.read_all(run_id))
    completed = [
        r.node_completed.wait.key
        for r in log
        if r.HasField("node_completed") and r.node_completed.HasField("wait")
    ]
    assert sorted(completed) == [f"approve-{w}" for w in range(WAITS)]  # each exactly once
    assert [seq for seq, _ in await store.log.read(run_id)] == list(range(len(log)))
    loaded = await Runtime(store).load(run_id)  # the log replays
    assert loaded.status is Status.SUCCEEDED


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(sent=deliveries, cuts=st.data())
def test_any_interleaving_of_deliveries_and_a_crash_leaves_a_log_that_replays(
    durable_store_url: str, sent: list[tuple[int, str]], cuts: st.DataObject
) -> None:
    bursts: list[int] = []
    left = len(sent)
    while left:
        size = cuts.draw(st.integers(1, left), label="burst")
        bursts.append(size)
        left -= size
    crash = cuts.draw(st.integers(-1, len(bursts) - 1), label="crash before burst (-1: none)")
    asyncio.run(scenario(durable_store_url, sent, bursts, crash))
