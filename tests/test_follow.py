"""Following a log to its end (`tether.engine.follow.follow`): every record once, in order,
woken by appends, ending at the run's finish; and the first-of helper leaves nothing running.
"""

from __future__ import annotations

import asyncio

from tests.agents import uid
from tests.waits_agents import approvals
from tether import Runtime, Status, Store
from tether.control.actions import wait_finished
from tether.engine.follow import Wakeups, follow
from tether.foundation.aio import first_of


async def test_follow_yields_each_record_once_and_ends_at_the_finish(store: Store) -> None:
    rt = Runtime(store)
    run_id = uid("f")
    assert (await rt.start(approvals, {"n": 1}, run_id=run_id)).status is Status.WAITING
    wakeups = Wakeups()
    rt.events.on_record(wakeups.on_record)
    seen: list[int] = []

    async def tail() -> None:
        # A poll of an hour: only a wake-up by the appends below can move it on.
        async for seq, _record in follow(store, run_id, wakeups=wakeups, poll=3600):
            seen.append(seq)

    follower = asyncio.create_task(tail())
    await rt.signal(run_id, "approve-0", {"approve": True})
    assert (await rt.resume(run_id)).status is Status.SUCCEEDED
    await asyncio.wait_for(follower, 30)
    assert seen == list(range(len(await store.log.read_all(run_id))))


async def test_wait_finished_is_woken_by_the_finish(store: Store) -> None:
    rt = Runtime(store)
    run_id = uid("w")
    await rt.start(approvals, {"n": 1}, run_id=run_id)
    waiting = asyncio.create_task(wait_finished(rt, run_id, within=3600))
    await rt.signal(run_id, "approve-0", {"approve": True})
    await rt.resume(run_id)
    assert await asyncio.wait_for(waiting, 30) is Status.SUCCEEDED


async def test_first_of_returns_at_the_first_and_cancels_the_rest() -> None:
    first = asyncio.Event()
    never = asyncio.Event()
    left = asyncio.ensure_future(never.wait())
    first.set()
    await first_of(first.wait(), left)
    assert left.cancelled()
