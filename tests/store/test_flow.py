"""Shared model rate limits and schedules, the same on every backend."""

from __future__ import annotations

import asyncio
import time

import pytest

from tether.foundation.errors import BadRateLimit, ScheduleExists
from tether.store import Store
from tether.store.rates import RateLimit
from tether.store.schedules import Schedule


async def test_an_unlimited_key_never_waits(store: Store) -> None:
    assert await store.rates.take("openai:none", 100) is None
    assert await store.rates.all() == []


async def test_requests_are_spaced_per_over_rate(store: Store) -> None:
    await store.rates.set(RateLimit("m", requests=2, per=1.0))
    assert await store.rates.take("m", 0) == 0.0
    wait = await store.rates.take("m", 0)
    assert wait is not None and 0 < wait <= 0.5
    await asyncio.sleep(wait)
    assert await store.rates.take("m", 0) == 0.0


async def test_tokens_meter_by_the_estimate_and_settle_corrects_it(store: Store) -> None:
    await store.rates.set(RateLimit("m", tokens=1000, per=10.0))
    assert await store.rates.take("m", 100) == 0.0  # the next call may start 1 s later
    wait = await store.rates.take("m", 100)
    assert wait is not None and 0.5 < wait <= 1.0
    await store.rates.settle("m", -100)  # it used nothing after all
    assert await store.rates.take("m", 100) == 0.0


async def test_a_429_blocks_every_taker_even_without_a_limit(store: Store) -> None:
    await store.rates.block("openai:x", 5.0)
    wait = await store.rates.take("openai:x", 1)
    assert wait is not None and 4.0 < wait <= 5.0
    [state] = await store.rates.all()
    assert state.limit is None and state.blocked_until > time.time() + 4
    # A limit given in code takes the 429-only row and keeps its block.
    await store.rates.set(RateLimit("openai:x", requests=100), only_if_missing=True)
    [state] = await store.rates.all()
    assert state.limit == RateLimit("openai:x", requests=100)
    wait = await store.rates.take("openai:x", 1)
    assert wait is not None and wait > 4.0


async def test_a_limit_set_by_hand_wins_over_one_in_code(store: Store) -> None:
    await store.rates.set(RateLimit("m", requests=5))
    await store.rates.set(RateLimit("m", requests=500, tokens=9), only_if_missing=True)
    assert [s.limit for s in await store.rates.all()] == [RateLimit("m", requests=5)]
    assert await store.rates.remove("m")
    assert not await store.rates.remove("m")
    assert await store.rates.take("m", 1) is None


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"requests": 0}, {"requests": -1}, {"tokens": 0.0}, {"requests": 1, "per": 0}],
)
def test_bad_limits_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(BadRateLimit):
        RateLimit("m", **kwargs)


async def test_concurrent_takers_never_both_start(store: Store) -> None:
    await store.rates.set(RateLimit("m", requests=1, per=60.0))
    waits = await asyncio.gather(*[store.rates.take("m", 0) for _ in range(20)])
    assert waits.count(0.0) == 1


async def test_schedules_add_list_advance_remove(store: Store) -> None:
    s = Schedule("nightly", "0 3 * * *", "demo", {"prompt": "hi"}, "Europe/Paris", "once",
                 created_at=1.0, fired_through=10.0, next_at=20.0)  # fmt: skip
    await store.schedules.add(s)
    with pytest.raises(ScheduleExists):
        await store.schedules.add(s)
    assert await store.schedules.all() == [s]
    assert await store.schedules.due(19.0) == []
    assert await store.schedules.due(20.0) == [s]
    assert await store.schedules.next_due() == 20.0
    await store.schedules.advance("nightly", 20.0, 30.0)
    await store.schedules.advance("nightly", 15.0, 25.0)  # never back
    [moved] = await store.schedules.all()
    assert (moved.fired_through, moved.next_at) == (20.0, 30.0)
    assert await store.schedules.remove("nightly")
    assert not await store.schedules.remove("nightly")
    assert await store.schedules.next_due() is None
