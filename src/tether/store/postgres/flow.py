"""Flow control on PostgreSQL: shared model rate limits, concurrency limits and schedules,
one statement each."""

from __future__ import annotations

from tether.foundation.errors import ScheduleExists
from tether.store.limits import ConcurrencyLimit, ConcurrencyLimits, limit_of
from tether.store.postgres.db import PgPool, rowcount
from tether.store.queries import load_queries
from tether.store.rates import MIN_WAIT, RateLimit, RateLimits, RateState, rate_state
from tether.store.schedules import Schedule, Schedules, schedule_of, schedule_row

RQ = load_queries("postgres", "rates.sql")
SQ = load_queries("postgres", "schedules.sql")
LQ = load_queries("postgres", "limits.sql")


class PostgresRates(RateLimits):
    def __init__(self, db: PgPool) -> None:
        self._db = db

    async def set(self, limit: RateLimit, *, only_if_missing: bool = False) -> None:
        query = RQ["rate_set_default" if only_if_missing else "rate_set"]
        await self._db.execute(query, limit.key, limit.requests, limit.tokens, limit.per)

    async def remove(self, key: str) -> bool:
        return rowcount(await self._db.execute(RQ["rate_remove"], key)) > 0

    async def all(self) -> list[RateState]:
        return [rate_state(r) for r in await self._db.fetch(RQ["rate_list"])]

    async def take(self, key: str, tokens: float) -> float | None:
        rows = await self._db.fetch(RQ["rate_take"], key, float(tokens))
        if not rows:
            return None
        granted, wait = rows[0]
        return 0.0 if granted else max(MIN_WAIT, float(wait))

    async def settle(self, key: str, tokens: float) -> None:
        await self._db.execute(RQ["rate_settle"], key, float(tokens))

    async def block(self, key: str, seconds: float) -> None:
        await self._db.execute(RQ["rate_block"], key, float(seconds))


class PostgresLimits(ConcurrencyLimits):
    def __init__(self, db: PgPool) -> None:
        self._db = db

    async def set(self, limit: ConcurrencyLimit, *, only_if_missing: bool = False) -> None:
        query = LQ["limit_set_default" if only_if_missing else "limit_set"]
        await self._db.execute(
            query, limit.agent, limit.stored_key, limit.each_key, limit.max_running
        )

    async def remove(self, agent: str, key: str | None = None, *, each_key: bool = False) -> bool:
        rows = await self._db.fetch(LQ["limit_remove"], agent, key or "", each_key)
        return bool(rows[0][0])

    async def all(self) -> list[ConcurrencyLimit]:
        return [limit_of(tuple(r)) for r in await self._db.fetch(LQ["limit_list"])]

    async def held(self, agent: str) -> dict[str, int]:
        return {r[0]: r[1] for r in await self._db.fetch(LQ["limit_held"], agent)}


class PostgresSchedules(Schedules):
    def __init__(self, db: PgPool) -> None:
        self._db = db

    async def add(self, schedule: Schedule) -> None:
        done = await self._db.execute(SQ["schedule_add"], *schedule_row(schedule))
        if rowcount(done) == 0:
            raise ScheduleExists(schedule.name)

    async def remove(self, name: str) -> bool:
        return rowcount(await self._db.execute(SQ["schedule_remove"], name)) > 0

    async def all(self) -> list[Schedule]:
        return [schedule_of(r) for r in await self._db.fetch(SQ["schedule_list"])]

    async def due(self, now: float) -> list[Schedule]:
        return [schedule_of(r) for r in await self._db.fetch(SQ["schedule_due"], now)]

    async def advance(self, name: str, fired_through: float, next_at: float) -> None:
        await self._db.execute(SQ["schedule_advance"], name, fired_through, next_at)

    async def next_due(self) -> float | None:
        value = (await self._db.fetch(SQ["schedule_next"]))[0][0]
        return None if value is None else float(value)
