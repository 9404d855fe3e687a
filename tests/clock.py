"""A clock the test moves by hand (`tether.foundation.clock.use(ManualClock())`): no sleeps,
exact times."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager

from tether.foundation.clock import Clock, use


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


class OffsetClock(Clock):
    """The system's clocks, `offset` seconds off: a host whose clock is ahead (or behind)."""

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def time(self) -> float:
        return time.time() + self.offset


@contextmanager
def skewed(offset: float) -> Iterator[None]:
    """This process's clock `offset` seconds off for the length of the block, everywhere
    Python reads it: `tether.foundation.clock` and `time.time` (as a host whose clock is
    set wrong would read it; the database's clock stays right)."""
    real_time, real_ns = time.time, time.time_ns
    time.time = lambda: real_time() + offset  # type: ignore[assignment]
    time.time_ns = lambda: real_ns() + int(offset * 1e9)  # type: ignore[assignment]
    try:
        with use(OffsetClock(offset)):
            yield
    finally:
        time.time, time.time_ns = real_time, real_ns  # type: ignore[assignment]
