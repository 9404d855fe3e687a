"""The clocks tether reads, behind one seam, so a test can move time instead of sleeping.

Record timestamps (and so wall-clock budgets, which sum the time between records), the
record writer's retry deadline and back-off, and a run's creation time (which orders
claims) read time here; PostgreSQL times leases by its own clock. `use(clock)` puts
another clock in place for the length of a `with` block; outside it, the system's answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager


class Clock:
    """The system's clocks. A subclass overrides all three to control time."""

    def time(self) -> float:
        """Wall-clock seconds since the epoch."""
        return time.time()

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back, for deadlines."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` on this clock."""
        await asyncio.sleep(seconds)


SYSTEM = Clock()
_current: Clock = SYSTEM


def current() -> Clock:
    """The clock in use."""
    return _current


def now() -> float:
    """Wall-clock seconds since the epoch."""
    return _current.time()


def now_us() -> int:
    """Wall-clock time in microseconds since the epoch."""
    if _current is SYSTEM:  # the hot path: integer nanoseconds, no float rounding
        return time.time_ns() // 1000
    return round(_current.time() * 1_000_000)


def monotonic() -> float:
    if _current is SYSTEM:  # the hot path (each append reads it): no method call
        return time.monotonic()
    return _current.monotonic()


async def sleep(seconds: float) -> None:
    await _current.sleep(seconds)


@contextmanager
def use(clock: Clock) -> Iterator[Clock]:
    """Read time from `clock` until the block ends (then from the clock before it)."""
    global _current
    previous, _current = _current, clock
    try:
        yield clock
    finally:
        _current = previous
