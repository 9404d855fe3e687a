"""Flow control on SQLite: shared model rate limits, concurrency limits and schedules, one
transaction each."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tether.foundation.errors import ScheduleExists
from tether.store.limits import ConcurrencyLimit, ConcurrencyLimits, limit_of
from tether.store.queries import load_queries
from tether.store.rates import MIN_WAIT, RateLimit, RateLimits, RateState, rate_state
from tether.store.schedules import Schedule, Schedules, schedule_of, schedule_row
from tether.store.sqlite.dbtime import db_now

if TYPE_CHECKING:
    from tether.store.sqlite.db import _Db

RQ = load_queries("sqlite", "rates.sql")
SQ = load_queries("sqlite", "schedules.sql")
LQ = load_queries("sqlite", "limits.sql")


async def _write(db: _Db, query: str, args: Mapping[str, object] | tuple[object, ...]) -> int:
    """One statement in its own transaction; the rows it changed."""

    def work(conn: sqlite3.Connection) -> int:
        return conn.execute(query, args).rowcount

    return await db.call(lambda: db.transaction(work))


class SqliteRates(RateLimits):
    def __init__(self, db: _Db) -> None:
        self._db = db

    async def _write(self, query: str, args: Mapping[str, object] | tuple[object, ...]) -> int:
        return await _write(self._db, query, args)

    async def set(self, limit: RateLimit, *, only_if_missing: bool = False) -> None:
        args = {
            "key": limit.key,
            "requests": limit.requests,
            "tokens": limit.tokens,
            "per": limit.per,
        }
        await self._write(RQ["rate_set_default" if only_if_missing else "rate_set"], args)

    async def remove(self, key: str) -> bool:
        return await self._write(RQ["rate_remove"], (key,)) > 0

    async def all(self) -> list[RateState]:
        rows = await self._db.call(lambda: self._db.conn.execute(RQ["rate_list"]).fetchall())
        return [rate_state(r) for r in rows]

    async def take(self, key: str, tokens: float) -> float | None:
        # Every process shares the file's write lock (BEGIN IMMEDIATE): takes never overlap.
        def work(conn: sqlite3.Connection) -> float | None:
            args = {"key": key, "tokens": float(tokens), "now": time.time()}
            if conn.execute(RQ["rate_take"], args).fetchall():
                return 0.0
            row = conn.execute(RQ["rate_wait"], args).fetchone()
            return None if row is None else max(MIN_WAIT, float(row[0]))

        return await self._db.call(lambda: self._db.transaction(work))

    async def settle(self, key: str, tokens: float) -> None:
        await self._write(RQ["rate_settle"], {"key": key, "tokens": float(tokens)})

    async def block(self, key: str, seconds: float) -> None:
        await self._write(RQ["rate_block"], {"key": key, "until": time.time() + seconds})


class SqliteLimits(ConcurrencyLimits):
    def __init__(self, db: _Db) -> None:
        self._db = db

    async def set(self, limit: ConcurrencyLimit, *, only_if_missing: bool = False) -> None:
        args = {
            "agent": limit.agent,
            "key": limit.stored_key,
            "each": int(limit.each_key),
            "n": limit.max_running,
        }
        await _write(self._db, LQ["limit_set_default" if only_if_missing else "limit_set"], args)

    async def remove(self, agent: str, key: str | None = None, *, each_key: bool = False) -> bool:
        args = {"agent": agent, "key": key or "", "each": int(each_key)}
        return await _write(self._db, LQ["limit_remove"], args) > 0

    async def all(self) -> list[ConcurrencyLimit]:
        rows = await self._db.call(lambda: self._db.conn.execute(LQ["limit_list"]).fetchall())
        return [limit_of(r) for r in rows]

    async def held(self, agent: str) -> dict[str, int]:
        def work() -> list[Any]:
            conn = self._db.conn
            return conn.execute(LQ["limit_held"], {"agent": agent, "now": db_now(conn)}).fetchall()

        rows = await self._db.call(work)
        return {r[0]: int(r[1]) for r in rows}


class SqliteSchedules(Schedules):
    def __init__(self, db: _Db) -> None:
        self._db = db

    async def add(self, schedule: Schedule) -> None:
        def work(conn: sqlite3.Connection) -> int:
            return conn.execute(SQ["schedule_add"], schedule_row(schedule)).rowcount

        if await self._db.call(lambda: self._db.transaction(work)) == 0:
            raise ScheduleExists(schedule.name)

    async def remove(self, name: str) -> bool:
        def work(conn: sqlite3.Connection) -> int:
            return conn.execute(SQ["schedule_remove"], (name,)).rowcount

        return await self._db.call(lambda: self._db.transaction(work)) > 0

    async def all(self) -> list[Schedule]:
        rows = await self._db.call(lambda: self._db.conn.execute(SQ["schedule_list"]).fetchall())
        return [schedule_of(r) for r in rows]

    async def due(self, now: float) -> list[Schedule]:
        rows = await self._db.call(
            lambda: self._db.conn.execute(SQ["schedule_due"], (now,)).fetchall()
        )
        return [schedule_of(r) for r in rows]

    async def advance(self, name: str, fired_through: float, next_at: float) -> None:
        args = {"name": name, "through": fired_through, "next": next_at}

        def work(conn: sqlite3.Connection) -> None:
            conn.execute(SQ["schedule_advance"], args)

        await self._db.call(lambda: self._db.transaction(work))

    async def next_due(self) -> float | None:
        row = await self._db.call(lambda: self._db.conn.execute(SQ["schedule_next"]).fetchone())
        return None if row is None or row[0] is None else float(row[0])
