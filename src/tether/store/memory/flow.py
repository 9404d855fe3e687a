"""Flow control in memory: the same rules as the SQL stores, for one process."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from tether.foundation.errors import ScheduleExists
from tether.store.base import RunInfo, Status
from tether.store.keys import KeyRow, RunKeys
from tether.store.limits import ConcurrencyLimit, ConcurrencyLimits, Limits
from tether.store.rates import MIN_WAIT, RateLimit, RateLimits, RateState, granted_meters
from tether.store.schedules import Schedule, Schedules


class MemoryRates(RateLimits):
    def __init__(self) -> None:
        self._rows: dict[str, RateState] = {}

    async def set(self, limit: RateLimit, *, only_if_missing: bool = False) -> None:
        old = self._rows.get(limit.key)
        if old is None:
            self._rows[limit.key] = RateState(limit, 0.0, 0.0, 0.0)
        elif old.limit is None or not only_if_missing:
            keep = only_if_missing  # a default taking a 429-only row keeps its meters
            meters = (old.requests_at, old.tokens_at) if keep else (0.0, 0.0)
            self._rows[limit.key] = RateState(limit, *meters, old.blocked_until)

    async def remove(self, key: str) -> bool:
        return self._rows.pop(key, None) is not None

    async def all(self) -> list[RateState]:
        return [self._rows[k] for k in sorted(self._rows)]

    async def take(self, key: str, tokens: float) -> float | None:
        row, now = self._rows.get(key), time.time()
        if row is None or (row.limit is None and row.blocked_until <= now):
            return None
        limit = row.limit
        meters = (row.requests_at, row.tokens_at, row.blocked_until)
        if limit is None:
            granted = granted_meters(None, None, 1.0, meters, tokens, now)
        else:
            granted = granted_meters(limit.requests, limit.tokens, limit.per, meters, tokens, now)
        if isinstance(granted, float):
            return max(MIN_WAIT, granted)
        self._rows[key] = replace(row, requests_at=granted[0], tokens_at=granted[1])
        return 0.0

    async def settle(self, key: str, tokens: float) -> None:
        row = self._rows.get(key)
        if row is not None and row.limit is not None and row.limit.tokens is not None:
            shift = tokens * row.limit.per / row.limit.tokens
            self._rows[key] = replace(row, tokens_at=row.tokens_at + shift)

    async def block(self, key: str, seconds: float) -> None:
        until = time.time() + seconds
        row = self._rows.get(key) or RateState(None, 0.0, 0.0, 0.0)
        self._rows[key] = replace(row, blocked_until=max(row.blocked_until, until))


def held_slots(runs: Iterable[RunInfo], now: float) -> dict[tuple[str, str], int]:
    """The live slots by (agent, key): top-level runs running under a live lease."""
    held: dict[tuple[str, str], int] = {}
    for r in runs:
        live = r.lease_until is not None and r.lease_until >= now
        if r.parent_run_id is None and r.status is Status.RUNNING and live:
            slot = (r.agent, r.key or "")
            held[slot] = held.get(slot, 0) + 1
    return held


def served_at(runs: Iterable[RunInfo]) -> dict[str, float]:
    """When each key was last served: the latest update of its top-level runs past queued."""
    at: dict[str, float] = {}
    for r in runs:
        if r.parent_run_id is None and r.status is not Status.QUEUED:
            key = r.key or ""
            at[key] = max(at.get(key, r.updated_at), r.updated_at)
    return at


class MemoryLimits(ConcurrencyLimits):
    def __init__(self, runs: Mapping[str, RunInfo]) -> None:
        self._rows: dict[tuple[str, str, bool], ConcurrencyLimit] = {}
        self._runs = runs

    def current(self) -> Limits:
        return Limits(list(self._rows.values()))

    async def set(self, limit: ConcurrencyLimit, *, only_if_missing: bool = False) -> None:
        scope = (limit.agent, limit.stored_key, limit.each_key)
        if not (only_if_missing and scope in self._rows):
            self._rows[scope] = limit

    async def remove(self, agent: str, key: str | None = None, *, each_key: bool = False) -> bool:
        return self._rows.pop((agent, key or "", each_key), None) is not None

    async def all(self) -> list[ConcurrencyLimit]:
        return [self._rows[s] for s in sorted(self._rows, key=lambda s: (s[0], s[2], s[1]))]

    async def held(self, agent: str) -> dict[str, int]:
        slots = held_slots(self._runs.values(), time.time())
        return {key: n for (a, key), n in slots.items() if a == agent}


class MemorySchedules(Schedules):
    def __init__(self) -> None:
        self._rows: dict[str, Schedule] = {}

    async def add(self, schedule: Schedule) -> None:
        if schedule.name in self._rows:
            raise ScheduleExists(schedule.name)
        self._rows[schedule.name] = schedule

    async def remove(self, name: str) -> bool:
        return self._rows.pop(name, None) is not None

    async def all(self) -> list[Schedule]:
        return [self._rows[n] for n in sorted(self._rows)]

    async def due(self, now: float) -> list[Schedule]:
        return sorted((s for s in self._rows.values() if s.next_at <= now), key=lambda s: s.next_at)

    async def advance(self, name: str, fired_through: float, next_at: float) -> None:
        row = self._rows.get(name)
        if row is not None and row.fired_through < fired_through:
            self._rows[name] = replace(row, fired_through=fired_through, next_at=next_at)

    async def next_due(self) -> float | None:
        return min((s.next_at for s in self._rows.values()), default=None)


class MemoryKeys(RunKeys):
    def __init__(self) -> None:
        self._rows: dict[str, KeyRow] = {}

    async def put(self, run_id: str, wrapped: bytes) -> bool:
        if run_id in self._rows:
            return False
        self._rows[run_id] = KeyRow(run_id, wrapped)
        return True

    async def get(self, run_ids: Sequence[str]) -> dict[str, KeyRow]:
        return {i: self._rows[i] for i in run_ids if i in self._rows}

    async def kept(self) -> list[KeyRow]:
        return [r for _, r in sorted(self._rows.items()) if r.wrapped is not None]

    async def rewrap(self, run_id: str, old: bytes, new: bytes) -> bool:
        row = self._rows.get(run_id)
        if row is None or row.wrapped != old:
            return False
        self._rows[run_id] = KeyRow(run_id, new)
        return True

    async def shred(self, run_ids: Sequence[str]) -> int:
        now, n = time.time(), 0
        for run_id in run_ids:
            row = self._rows.get(run_id)
            if row is not None and row.wrapped is not None:
                self._rows[run_id] = KeyRow(run_id, None, now)
                n += 1
        return n
