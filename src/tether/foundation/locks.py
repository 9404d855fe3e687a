"""A first-come lock whose free case costs no coroutine: the executor's append lock.

`async with asyncio.Lock()` runs three coroutines (`__aenter__`, `acquire`, `__aexit__`)
even when nobody holds the lock, which is nearly always for a run's appends: its loop
appends completions and its node tasks append journaled steps, one at a time.
`take_now` takes a free lock in a plain call; only a taker that finds it held awaits,
and `release` hands the lock straight to the first waiter still waiting.
"""

from __future__ import annotations

import asyncio
from collections import deque


class HandoffLock:
    """Held by one taker at a time, handed over in the order takers came."""

    __slots__ = ("_held", "_waiters")

    def __init__(self) -> None:
        self._held = False
        self._waiters: deque[asyncio.Future[None]] = deque()

    def locked(self) -> bool:
        return self._held

    def take_now(self) -> bool:
        """Take the lock if it is free; whether it was taken."""
        if self._held:
            return False
        self._held = True
        return True

    async def take(self) -> None:
        """Take the lock, waiting for it if it is held."""
        if self.take_now():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed over as this taker was cancelled: pass it on
            raise

    def release(self) -> None:
        """Give the lock to the first taker still waiting, or free it."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # held on: it is the waiter's now
                return
        self._held = False

    async def __aenter__(self) -> None:
        await self.take()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()


__all__ = ["HandoffLock"]
