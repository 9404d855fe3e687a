"""One loop's wake-ups: what finished lands in a list, and the loop waits on one future.

`asyncio.wait(tasks, FIRST_COMPLETED)` adds a callback to every awaited task and removes it
again on every wake-up: work proportional to the tasks in flight, each time one completes.
Here each task hands its outcome over itself as its last step (`finished`), which also
wakes the loop; the loop takes everything finished since its last wake-up as one batch.
Costs are O(1) per completion and per wake-up, whatever the number in flight, and no
done-callback round through the event loop sits between a task's end and the wake-up.
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

T = TypeVar("T")


class Wakeup(Generic[T]):
    """Outcomes and pokes for one waiting loop; `wait` returns at once if any came."""

    __slots__ = ("_poked", "_waiter", "outcomes")

    def __init__(self) -> None:
        # What finished since the loop last took it, in order.
        self.outcomes: list[T] = []
        self._poked = False
        self._waiter: asyncio.Future[None] | None = None

    def finished(self, outcome: T) -> None:
        """Hand `outcome` to the loop and wake it (`poke`, written out: once a node)."""
        self.outcomes.append(outcome)
        self._poked = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def poke(self, *_: object) -> None:
        """Wake the loop (now, or at its next `wait` if it is not waiting)."""
        self._poked = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def take(self) -> list[T]:
        """The outcomes handed over since the last call (the loop looks at everything else
        that can poke it before it waits again)."""
        self._poked = False
        taken, self.outcomes = self.outcomes, []
        return taken

    async def wait(self, until: float | None = None) -> None:
        """Until poked or handed an outcome (at once if that happened since the last wait),
        or the loop's clock reaches `until`."""
        if not self._poked:
            loop = asyncio.get_running_loop()
            waiter = self._waiter = loop.create_future()
            timer = None if until is None else loop.call_at(until, self.poke)
            try:
                await waiter
            finally:
                self._waiter = None
                if timer is not None:
                    timer.cancel()
        self._poked = False
