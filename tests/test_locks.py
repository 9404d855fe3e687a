"""The append lock (tether.foundation.locks.HandoffLock): a free lock is taken in a plain
call; a held one is handed to its waiters in the order they came, skipping those cancelled."""

from __future__ import annotations

import asyncio

from tether.foundation.locks import HandoffLock


async def test_a_free_lock_is_taken_at_once_and_a_held_one_is_not() -> None:
    lock = HandoffLock()
    assert lock.take_now() and lock.locked()
    assert not lock.take_now()
    lock.release()
    assert not lock.locked() and lock.take_now()


async def test_a_held_lock_is_handed_to_its_waiters_in_order() -> None:
    lock = HandoffLock()
    order: list[str] = []

    async def taker(name: str) -> None:
        async with lock:
            order.append(name)
            await asyncio.sleep(0)

    assert lock.take_now()
    tasks = [asyncio.create_task(taker(n)) for n in "abc"]
    await asyncio.sleep(0)  # all three wait
    assert order == [] and lock.locked()
    lock.release()
    await asyncio.gather(*tasks)
    assert order == ["a", "b", "c"] and not lock.locked()


async def test_a_cancelled_waiter_is_skipped_and_a_handed_lock_is_passed_on() -> None:
    lock = HandoffLock()
    got: list[str] = []

    async def taker(name: str) -> None:
        await lock.take()
        got.append(name)
        lock.release()

    assert lock.take_now()
    a, b, c = (asyncio.create_task(taker(n)) for n in "abc")
    await asyncio.sleep(0)
    a.cancel()  # cancelled while waiting: never handed the lock
    await asyncio.sleep(0)
    lock.release()  # handed to b ...
    b.cancel()  # ... which is cancelled before it runs: it passes the lock on to c
    await asyncio.gather(a, b, c, return_exceptions=True)
    assert got == ["c"] and not lock.locked()
