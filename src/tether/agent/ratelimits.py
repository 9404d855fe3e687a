"""A model call takes from its model's shared rate limit before it starts.

The limit lives in the store (`tether limits set --model`, or `Agent(rate_limits=...)` as a
default), so every worker on it shares one meter. A call that may not start yet sleeps
until the meter says and takes again; the time is added to the node's recorded timings
(`used.rate_wait_ms`). A provider's 429 blocks the key for every worker for its
Retry-After. Token limits meter the request's estimate, corrected by the actual usage.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from tether.agent.messages import Message, ModelReply, ToolSpec
from tether.agent.providers import BEFORE_SEND, Provider
from tether.agent.retries import throttled
from tether.engine.context import Context
from tether.foundation import clock
from tether.store.rates import RateLimit, RateLimits

Call = Callable[[], Awaitable[ModelReply]]
Estimate = Callable[[], int]
T = TypeVar("T")
Used = Callable[[T], int]
# How long a gate trusts what it read of its key's token limit.
TOKEN_LIMITS_TTL = 5.0
# A rough count, as providers' own pre-flight estimates are: about four characters a token.
CHARS_PER_TOKEN = 4


def estimate_tokens(system: str, messages: list[Message], tools: list[ToolSpec]) -> int:
    """The tokens a request is expected to use, counted before it is sent."""
    text = system + json.dumps(messages, default=str)
    text += "".join(t.name + t.description + json.dumps(t.schema) for t in tools)
    return math.ceil(len(text) / CHARS_PER_TOKEN)


class RateGate:
    """What one agent's model calls take from: the limit named `key` in the run's store."""

    def __init__(self, key: str, defaults: Sequence[RateLimit] = ()) -> None:
        self.key = key
        self.defaults = tuple(defaults)
        # Stores this process already gave the defaults to (a limit set by hand wins).
        self._stored: set[int] = set()
        # Per store: when it was last asked whether the key has a token limit, and that.
        self._token_limited: dict[int, tuple[float, bool]] = {}

    async def _store_defaults(self, rates: RateLimits) -> None:
        if id(rates) in self._stored:
            return
        for limit in self.defaults:
            await rates.set(limit, only_if_missing=True)
        self._stored.add(id(rates))

    async def _meters_tokens(self, rates: RateLimits) -> bool:
        """Whether the key has a token limit, looked up at most every TOKEN_LIMITS_TTL s:
        only then is a request's estimate worth its cost (it serializes the conversation).
        A token limit set meanwhile meters actual usage at once (`settle`), estimates soon."""
        now = clock.monotonic()
        seen = self._token_limited.get(id(rates))
        if seen is None or now - seen[0] > TOKEN_LIMITS_TTL:
            states = await rates.all()
            limited = any(
                s.limit is not None and s.limit.key == self.key and s.limit.tokens is not None
                for s in states
            )
            seen = self._token_limited[id(rates)] = (now, limited)
        return seen[1]

    async def wait(self, ctx: Context, estimate: Estimate | None) -> int | None:
        """Return once a call may start: the tokens it was metered for (its `estimate()`
        when the key has a token limit, else 0; None: no estimate at all), or None when the
        key has no limit; the time waited is counted in the node's timings."""
        rates = ctx.store.rates
        await self._store_defaults(rates)
        tokens = 0
        if estimate is not None and await self._meters_tokens(rates):
            tokens = estimate()
        while True:
            wait = await rates.take(self.key, tokens)
            if not wait:
                return None if wait is None else tokens
            started = clock.monotonic()
            await clock.sleep(wait)
            ctx.rate_wait_s += clock.monotonic() - started

    async def call(
        self, ctx: Context, estimate: Estimate, provider: Provider, call: Call
    ) -> ModelReply:
        """Make one model call under the limit: wait (right before its request is sent, if
        the provider can say when), call, then settle the tokens, or block on a 429.
        `estimate()` (the request's tokens) is computed only for a key with a token limit."""
        metered: list[int | None] = []

        async def wait() -> None:
            if not metered:  # one request per call: SDK retries are off
                metered.append(await self.wait(ctx, estimate))

        if not provider.awaits_before_send:
            await wait()
        rates = ctx.store.rates
        hooked = BEFORE_SEND.set(wait)
        try:
            reply = await call()
        except Exception as exc:
            block = throttled(exc)
            if block is not None:
                await rates.block(self.key, block)
            raise
        finally:
            BEFORE_SEND.reset(hooked)
        await self._settle(
            rates, metered[0] if metered else None, reply.tokens_in + reply.tokens_out
        )
        return reply

    async def metered(self, ctx: Context, call: Callable[[], Awaitable[T]], used: Used[T]) -> T:
        """One model call another SDK makes (an integration's): wait for the limit, call,
        then meter the tokens it `used`, or block the key on a 429. No estimate: the SDK
        builds the request, so a token limit meters the actual usage only."""
        charged = await self.wait(ctx, None)
        try:
            result = await call()
        except Exception as exc:
            block = throttled(exc)
            if block is not None:
                await ctx.store.rates.block(self.key, block)
            raise
        await self._settle(ctx.store.rates, charged, used(result))
        return result

    async def _settle(self, rates: RateLimits, charged: int | None, used: int) -> None:
        """Correct the token meter of a call metered for `charged` tokens that `used` some."""
        if charged is not None and used and used != charged:
            await rates.settle(self.key, used - charged)
