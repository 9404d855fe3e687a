"""Retention on PostgreSQL: id arrays, short delete transactions, a session advisory lock."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence

import asyncpg

from tether.store.base import RunInfo, Status
from tether.store.postgres.db import PgPool
from tether.store.queries import load_queries
from tether.store.retention import FINISHED, Retention, Rows

Q = load_queries("postgres")
F = load_queries("postgres", "forks.sql")


class PostgresRetention(Retention):
    def __init__(self, db: PgPool, info_of: Callable[[asyncpg.Record], RunInfo]) -> None:
        self._db = db
        self._info = info_of

    async def expired(
        self,
        before: float,
        *,
        statuses: Sequence[Status] = FINISHED,
        agent: str | None = None,
        after: tuple[float, str] = (0.0, ""),
        limit: int = 100,
    ) -> list[RunInfo]:
        rows = await self._db.fetch(
            Q["expired"], [s.value for s in statuses], before, agent, after[0], after[1], limit
        )
        return [self._info(r) for r in rows]

    async def families(self, run_ids: Sequence[str]) -> list[RunInfo]:
        return [self._info(r) for r in await self._db.fetch(Q["families"], list(run_ids))]

    async def log_size(self, run_ids: Sequence[str]) -> Rows:
        row = (await self._db.fetch(Q["log_size"], list(run_ids)))[0]
        return Rows(int(row[0]), int(row[1]))

    async def delete_log(self, run_ids: Sequence[str], *, limit: int) -> Rows | None:
        # The runs' rows FOR UPDATE first: a fork being created from one of them holds it
        # FOR KEY SHARE to its commit, and the statements after the lock see its references.
        ids = list(run_ids)
        async with self._db.connection() as conn, conn.transaction():
            await conn.fetch(F["lock_doomed"], ids)
            if await conn.fetchval(F["referenced"], ids):
                return None
            row = (await conn.fetch(Q["delete_log"], ids, limit))[0]
        return Rows(int(row[0]), int(row[1]))

    async def seal(self, run_ids: Sequence[str]) -> int:
        return len(await self._db.fetch(Q["seal"], list(run_ids)))

    async def unseal(self, run_ids: Sequence[str]) -> None:
        await self._db.execute(Q["unseal"], list(run_ids))

    async def delete_runs(self, run_ids: Sequence[str]) -> int:
        return int((await self._db.fetch(Q["delete_runs"], list(run_ids)))[0][0])

    @contextlib.asynccontextmanager
    async def exclusive(self, name: str) -> AsyncIterator[bool]:
        # A session lock lives as long as this connection: held for the whole block, and
        # dropped by the server if this process dies.
        async with self._db.connection() as conn:
            taken = bool(await conn.fetchval(Q["try_lock"], name))
            try:
                yield taken
            finally:
                if taken:
                    await conn.fetchval(Q["unlock"], name)
