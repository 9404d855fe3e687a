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

from tether import clock
from tether.agent.messages import Message, ModelReply, ToolSpec
from tether.agent.providers import BEFORE_SEND, Provider
from tether.agent.retries import throttled
from tether.context import Context
from tether.store.rates import RateLimit, RateLimits

Call = Callable[[], Awaitable[ModelReply]]
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

    async def _store_defaults(self, rates: RateLimits) -> None:
        if id(rates) in self._stored:
            return
        for limit in self.defaults:
            await rates.set(limit, only_if_missing=True)
        self._stored.add(id(rates))

    async def wait(self, ctx: Context, tokens: int) -> bool:
        """Return once a call of `tokens` estimated tokens may start (False: the key has no
        limit); the time waited is counted in the node's timings."""
        rates = ctx.store.rates
        await self._store_defaults(rates)
        while True:
            wait = await rates.take(self.key, tokens)
            if not wait:
                return wait is not None
            started = clock.monotonic()
            await clock.sleep(wait)
            ctx.rate_wait_s += clock.monotonic() - started

    async def call(self, ctx: Context, tokens: int, provider: Provider, call: Call) -> ModelReply:
        """Make one model call under the limit: wait (right before its request is sent, if
        the provider can say when), call, then settle the tokens, or block on a 429."""
        limited: list[bool] = []

        async def wait() -> None:
            if not limited:  # one request per call: SDK retries are off
                limited.append(await self.wait(ctx, tokens))

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
        used = reply.tokens_in + reply.tokens_out
        if any(limited) and used and used != tokens:
            await rates.settle(self.key, used - tokens)
        return reply
