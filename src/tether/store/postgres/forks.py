"""Forks on PostgreSQL: a fork's row, seq 0, own rows, references and origin in one transaction."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from tether.foundation.errors import ConflictingRecord, RunExists
from tether.store.forks import (
    ForkTable,
    NewRun,
    Origin,
    Segment,
    last_rows,
    plan_copies,
    source_gone,
)
from tether.store.postgres.db import PgPool
from tether.store.postgres.runs import create_args
from tether.store.queries import load_queries

Q = load_queries("postgres")
F = load_queries("postgres", "forks.sql")


class PostgresForks(ForkTable):
    def __init__(self, db: PgPool) -> None:
        self._db = db

    async def create_runs(self, runs: Sequence[NewRun]) -> None:
        async with self._db.connection() as conn, conn.transaction():
            for run in runs:
                await _insert(conn, run)

    async def rows_at(self, run_id: str, seqs: Sequence[int]) -> dict[int, bytes]:
        rows = await self._db.fetch(F["rows_at"], run_id, list(seqs))
        return {int(r[0]): r[1] for r in rows}

    async def segments(self, run_id: str) -> list[Segment]:
        rows = await self._db.fetch(F["segments"], run_id)
        return [Segment(int(r[0]), int(r[1]), r[2]) for r in rows]

    async def origins(self, run_ids: Sequence[str]) -> dict[str, Origin]:
        rows = await self._db.fetch(F["origins"], list(run_ids))
        return {r[0]: Origin(r[1], int(r[2])) for r in rows}

    async def forks_of(self, run_id: str) -> list[str]:
        return [r[0] for r in await self._db.fetch(F["forks_of"], run_id)]

    async def detach(self, run_ids: Sequence[str], *, limit: int) -> int:
        async with self._db.connection() as conn, conn.transaction():
            refs = await conn.fetch(F["refs_to"], list(run_ids), limit)
            copies = plan_copies((tuple(r) for r in refs), limit)
            for c in copies:
                await conn.execute(F["copy_rows"], c.run_id, c.source_run_id, c.from_seq, c.to_seq)
                if c.rest_from is None:
                    await conn.execute(F["drop_ref"], c.run_id, c.from_seq)
                else:
                    await conn.execute(F["shrink_ref"], c.run_id, c.from_seq, c.rest_from)
        return sum(c.to_seq - c.from_seq + 1 for c in copies)


async def _insert(conn: PoolConnectionProxy, run: NewRun) -> None:
    """One run's row, seq 0, own rows, references and origin, in the caller's transaction."""
    info = run.info
    if run.segments:
        await _lock_sources(conn, run.segments)
    try:
        created = await conn.fetchval(Q["create_run"], *create_args(info, run.first_record))
    except asyncpg.NotNullViolationError as exc:
        if exc.column_name != "seq":
            raise
        raise ConflictingRecord(info.run_id, 0) from None
    if created == 0:
        raise RunExists(info.run_id)
    if run.entries:
        seqs = [seq for seq, _ in run.entries]
        await conn.execute(Q["append"], info.run_id, seqs, [r for _, r in run.entries])
    if run.segments:
        await conn.execute(
            F["add_refs"],
            info.run_id,
            [s.from_seq for s in run.segments],
            [s.to_seq for s in run.segments],
            [s.source_run_id for s in run.segments],
        )
    if (o := run.origin) is not None:
        await conn.execute(F["add_origin"], info.run_id, o.source_run_id, o.source_seq)


async def _lock_sources(conn: PoolConnectionProxy, segments: Sequence[Segment]) -> None:
    """Lock the runs these references point to (FOR KEY SHARE, to the end of the caller's
    transaction) and check they still have every row referenced: a delete batch of one of
    them waits for this transaction and then sees its references (`PostgresRetention`)."""
    wanted = sorted({s.source_run_id for s in segments})
    locked = {r[0] for r in await conn.fetch(F["lock_sources"], wanted)}
    for run_id in wanted:
        if run_id not in locked:
            raise source_gone(run_id, exists=False)
    ends = last_rows(segments)
    gone = await conn.fetchval(F["missing_row"], [r for r, _ in ends], [q for _, q in ends])
    if gone is not None:
        raise source_gone(gone, exists=True)
