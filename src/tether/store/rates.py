"""Shared model rate limits: one meter per model (or API key) that every worker takes from.

A limit allows `requests` and `tokens` per `per` seconds. Each is metered as the time the
next call may start (GCRA, the "generic cell rate algorithm"): a call may start once both
times are due and no provider's 429 blocks the key; it then pushes each on by its cost
(1 request, its estimated tokens) times `per / rate`. Calls are so spaced that no window of
`per` seconds starts more than `requests` of them, whichever worker makes them. Taking is
one statement on every backend; a caller that may not start yet is told how long to wait.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from tether.foundation.errors import BadRateLimit

DEFAULT_PER = 60.0
MAX_KEY = 200
# Shortest wait reported while a call may not start (a row another worker just took).
MIN_WAIT = 0.001


@dataclass(frozen=True, slots=True)
class RateLimit:
    """`requests` and/or `tokens` per `per` seconds for the model (or API key) `key`."""

    key: str
    requests: float | None = None
    tokens: float | None = None
    per: float = DEFAULT_PER

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not 1 <= len(self.key) <= MAX_KEY:
            raise BadRateLimit(f"rate limit key {self.key!r}: give a model, 1 to {MAX_KEY} chars")
        if self.requests is None and self.tokens is None:
            raise BadRateLimit(
                f"rate limit for {self.key!r}: give requests (--rpm) or tokens (--tpm)"
            )
        for what, value in (
            ("requests", self.requests),
            ("tokens", self.tokens),
            ("per", self.per),
        ):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise BadRateLimit(
                    f"rate limit for {self.key!r}: {what} must be a number above 0, not {value!r}"
                )


@dataclass(frozen=True, slots=True)
class RateState:
    """A limit as stored, with its meters (seconds since the epoch, the store's clock)."""

    limit: RateLimit | None  # None: no limit, only a provider's 429 recorded for the key
    requests_at: float
    tokens_at: float
    blocked_until: float


def rate_state(row: Any) -> RateState:
    key, requests, tokens, per = row[0], row[1], row[2], row[3]
    limited = requests is not None or tokens is not None
    limit = RateLimit(key, requests, tokens, per) if limited else None
    return RateState(limit, float(row[4]), float(row[5]), float(row[6]))


def granted_meters(
    requests: float | None,
    tokens: float | None,
    per: float,
    meters: tuple[float, float, float],
    cost: float,
    now: float,
) -> tuple[float, float] | float:
    """The new (requests_at, tokens_at) when a call of `cost` tokens may start at `now`,
    else the seconds to wait: the rule the SQL statements write, for the memory store."""
    requests_at, tokens_at, blocked_until = meters
    due = max(requests_at, tokens_at, blocked_until)
    if due > now:
        return due - now
    return (
        requests_at if requests is None else now + per / requests,
        tokens_at if tokens is None else now + cost * per / tokens,
    )


class RateLimits(ABC):
    """The stored limits and their meters."""

    @abstractmethod
    async def set(self, limit: RateLimit, *, only_if_missing: bool = False) -> None:
        """Store a limit (its meters start afresh); with `only_if_missing`, a limit already
        stored for the key wins (how limits given in code act as defaults)."""

    @abstractmethod
    async def remove(self, key: str) -> bool:
        """Forget the key's limit and meters; False if there was none."""

    @abstractmethod
    async def all(self) -> list[RateState]:
        """Every stored key, by key."""

    @abstractmethod
    async def take(self, key: str, tokens: float) -> float | None:
        """Start one call of `tokens` estimated tokens now if the key's limit allows: 0.0.

        Else the seconds to wait before taking again; None when the key has no limit
        stored (and no 429 blocks it), so the call goes ahead.
        """

    @abstractmethod
    async def settle(self, key: str, tokens: float) -> None:
        """Correct the key's token meter by `tokens` (actual minus estimated; may be < 0)."""

    @abstractmethod
    async def block(self, key: str, seconds: float) -> None:
        """A provider answered 429: no worker starts a call on `key` for `seconds`."""
