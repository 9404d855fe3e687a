"""A clock the test moves by hand (`tether.foundation.clock.use(ManualClock())`): no sleeps,
exact times."""

from __future__ import annotations

import asyncio

from tether.foundation.clock import Clock


class ManualClock(Clock):
    """Stands still until `advance`; a `sleep` on it moves it and returns at once."""

    def __init__(self, start: float = 1_750_000_000.0) -> None:
        self.now = start
        self.mono = 1000.0
        self.slept: list[float] = []

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.mono += seconds

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(seconds)
        await asyncio.sleep(0)  # still a suspension point, as a real sleep is
