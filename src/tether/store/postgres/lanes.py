"""Append lanes: a few connections of the log's own, outside the pool, for its appends.

A pooled connection costs its acquire and release on every statement (asyncpg's queue, an
inactivity timer, a shielded release task): about 190,000 instructions, more than the
statement itself (~120,000), on the path every node's record takes. A lane is taken from a
list and put back. There are as many lanes as the group commit lets statements be in
flight (`group_commit`, at least one), opened when first needed; an append that finds
every lane busy (a retry, or `group_commit=0` under load) takes a pooled connection.

A lane whose statement may never be answered (timeout, cancellation) or whose connection
was lost is closed and forgotten: the next append opens a fresh one.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from tether.foundation.errors import StoreError, StoreUnavailable
from tether.store.postgres.db import (
    PgPool,
    close_quietly,
    guard,
    is_unavailable,
    unavailable,
    wrap_errors,
)


class AppendLanes:
    """Up to `size` dedicated connections, handed out one statement at a time."""

    def __init__(self, db: PgPool, size: int) -> None:
        self._db = db
        self.size = max(1, size)
        self._idle: list[asyncpg.Connection] = []
        self.opened = 0  # lanes open now, idle or busy

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection | PoolConnectionProxy]:
        """An idle lane, a new one while fewer than `size` are open, else a pooled
        connection; driver errors in the block come out as tether's."""
        db = self._db
        if not db.is_open:
            raise StoreError(f"postgresql {db.where}: the store is not open (call open())")
        if self._idle:
            conn = self._idle.pop()
        elif self.opened < self.size:
            self.opened += 1
            try:
                conn = await db.connect_one()
            except BaseException:
                self.opened -= 1
                raise
        else:
            async with db.connection() as pooled:
                yield pooled
            return
        broken = True  # until the block ends well, or with a plain statement error
        try:
            with wrap_errors(db.where), guard(db.where, conn):
                yield conn
            broken = False
        except StoreError as exc:
            broken = isinstance(exc, StoreUnavailable)
            raise
        finally:
            if broken or conn.is_closed() or not db.is_open:
                self._forget(conn)
            else:
                self._idle.append(conn)

    def execute(self, sql: str, *args: Any) -> Awaitable[str | asyncpg.PostgresError]:
        """`conn.execute` on a lane; see `_run` (handed back, not awaited in a coroutine of
        its own: one frame less on every append)."""
        return self._run(False, sql, args)

    def fetch(
        self, sql: str, *args: Any
    ) -> Awaitable[list[asyncpg.Record] | asyncpg.PostgresError]:
        """`conn.fetch` on a lane; see `_run`."""
        return self._run(True, sql, args)

    async def _run(self, fetch: bool, sql: str, args: tuple[Any, ...]) -> Any:
        """One statement on an idle lane (else on what `connection()` gives). A statement
        the server refused (a PostgresError other than a lost connection) is returned for
        the caller to judge; other driver errors come out as tether's.

        The hot path of every append: no context manager (three of them cost ~15 us).
        """
        idle = self._idle
        db = self._db
        if not idle or not db.is_open:
            async with self.connection() as pooled:
                try:
                    return await (pooled.fetch if fetch else pooled.execute)(sql, *args)
                except asyncpg.PostgresError as exc:
                    if is_unavailable(exc):
                        raise
                    return exc
        conn = idle.pop()
        try:
            result = await (conn.fetch if fetch else conn.execute)(sql, *args)
        except asyncpg.PostgresError as exc:
            if is_unavailable(exc) or conn.is_closed():
                self._forget(conn)
                raise unavailable(db.where, exc) from exc
            idle.append(conn)
            return exc
        except BaseException:
            self._forget(conn)
            with wrap_errors(db.where), guard(db.where, conn):
                raise  # as tether's error, as from connection()
        if conn.is_closed() or not db.is_open:
            self._forget(conn)
        else:
            idle.append(conn)
        return result

    def _forget(self, conn: asyncpg.Connection) -> None:
        self.opened -= 1
        conn.terminate()

    async def close(self) -> None:
        """Close the idle lanes (a busy one is closed when its statement returns)."""
        idle, self._idle = self._idle, []
        self.opened -= len(idle)
        for conn in idle:
            await close_quietly(conn)
