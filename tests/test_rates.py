"""Shared model rate limits on the agent's model calls: waits in the timings, 429s shared."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from tests.rate_agents import answer
from tether import Runtime, Status, Store
from tether.agent import Agent
from tether.model.run_view import rate_wait_ms
from tether.store import store_from_url
from tether.testing import LocalModelServer, RateLimited, serve_local_models

MODEL = "openai:script:rated"


@pytest.fixture
async def models() -> AsyncIterator[LocalModelServer]:
    async with serve_local_models({"rated": answer}) as server:
        yield server


def agent(models: LocalModelServer, name: str, **kw: object) -> Agent:
    return Agent(name, model=MODEL, base_url=models.openai_base_url, api_key="k", **kw)  # type: ignore[arg-type]


async def test_calls_wait_for_the_limit_given_in_code_and_the_wait_is_recorded(
    store: Store, models: LocalModelServer
) -> None:
    from tether.store.rates import RateLimit

    limited = agent(models, "limited", rate_limits=[RateLimit(MODEL, requests=2, per=1.0)])
    async with limited:
        rt = Runtime(store)
        outcomes = await asyncio.gather(*[limited.run(rt, f"q{i}") for i in range(3)])
    assert [o.status for o in outcomes] == [Status.SUCCEEDED] * 3
    # Two calls a second, spaced: the second and third waited, and their nodes say so.
    waits = sorted(rate_wait_ms(o.graph) for o in outcomes)
    assert waits[0] == 0 and waits[1] > 0 and waits[2] > waits[1]
    assert len(models.requests) == 3
    [state] = await store.rates.all()
    assert state.limit == RateLimit(MODEL, requests=2, per=1.0)


async def test_a_limit_set_by_hand_wins_over_the_one_in_code(
    store: Store, models: LocalModelServer
) -> None:
    from tether.store.rates import RateLimit

    await store.rates.set(RateLimit(MODEL, requests=1000))
    fast = agent(models, "fast", rate_limits=[RateLimit(MODEL, requests=1, per=3600.0)])
    async with fast:
        rt = Runtime(store)
        outcomes = [await fast.run(rt, f"q{i}") for i in range(2)]
    # The meter spaced them as the hand limit says (1000 a minute: 60 ms apart at most),
    # where the code's limit (1 an hour) would have held the second for an hour.
    hand = RateLimit(MODEL, requests=1000)
    spacing_ms = hand.per / hand.requests * 1000
    first, second = (rate_wait_ms(o.graph) for o in outcomes)
    assert first == 0 and second <= spacing_ms
    assert [s.limit for s in await store.rates.all()] == [RateLimit(MODEL, requests=1000)]


async def test_a_429_holds_back_every_worker_for_its_retry_after(
    durable_store_url: str, models: LocalModelServer
) -> None:
    """Three runtimes on their own connections (three workers): one gets a 429 asking for
    1.5 s; the others, started after it, send nothing until that time has passed."""
    stores = [store_from_url(durable_store_url) for _ in range(3)]
    for s in stores:
        await s.open()
    try:
        models.inject(RateLimited(retry_after=1.5))
        first = agent(models, "first")
        async with first:
            run_a = asyncio.ensure_future(first.run(Runtime(stores[0]), "a"))
            blocked_until = 0.0
            while not blocked_until:  # A recorded the 429 for everyone
                assert not run_a.done(), run_a.result()
                await asyncio.sleep(0.02)
                blocked_until = max(
                    (s.blocked_until for s in await stores[1].rates.all()), default=0.0
                )
            assert blocked_until > time.time() + 1.0
            late = [agent(models, f"late{i}") for i in range(2)]
            outcomes = await asyncio.gather(
                run_a,
                *[
                    a.run(Runtime(s), f"b{i}")
                    for i, (a, s) in enumerate(zip(late, stores[1:], strict=True))
                ],
            )
            for a in late:
                await a.aclose()
    finally:
        for s in stores:
            await s.close()
    assert [o.status for o in outcomes] == [Status.SUCCEEDED] * 3
    statuses = [(r.status, r.at) for r in models.requests]
    assert [s for s, _ in statuses].count(429) == 1
    refused_at = next(at for s, at in statuses if s == 429)
    later = [at for s, at in statuses if s == 200]
    assert len(later) == 3
    # Nobody (the run that got the 429 included) called again before the block ran out.
    assert min(later) >= refused_at + 1.4
    assert all(rate_wait_ms(o.graph) > 0 for o in outcomes[1:])


@pytest.mark.parametrize(("limit", "estimates"), [({"requests": 100}, 0), ({"tokens": 10**6}, 2)])
async def test_a_request_is_estimated_only_when_its_key_has_a_token_limit(
    store: Store,
    models: LocalModelServer,
    monkeypatch: pytest.MonkeyPatch,
    limit: dict[str, float],
    estimates: int,
) -> None:
    from tether.agent import loop
    from tether.store.rates import RateLimit

    counted: list[int] = []
    real = loop.estimate_tokens

    def counting(*args: object) -> int:
        counted.append(real(*args))  # type: ignore[arg-type]
        return counted[-1]

    monkeypatch.setattr(loop, "estimate_tokens", counting)
    metered = agent(models, f"metered-{estimates}", rate_limits=[RateLimit(MODEL, **limit)])
    async with metered:
        rt = Runtime(store)
        outcomes = [await metered.run(rt, f"q{i}") for i in range(2)]
    assert [o.status for o in outcomes] == [Status.SUCCEEDED] * 2
    # Serializing the conversation is what a token limit costs, and nothing else pays it.
    assert len(counted) == estimates and all(n > 0 for n in counted)
