"""The runs table on PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Callable

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from tether.foundation import clock
from tether.foundation.errors import ConflictingRecord, RunExists, StaleEpoch, UnknownRun
from tether.store.base import EVERY_RUN, RunFilter, RunInfo, RunTable, Status
from tether.store.postgres.db import PgPool, rowcount
from tether.store.postgres.log import append_final
from tether.store.queries import load_queries

Q = load_queries("postgres")


def run_info(row: asyncpg.Record) -> RunInfo:
    return RunInfo(
        run_id=row["run_id"],
        agent=row["agent"],
        status=Status(row["status"]),
        parent_run_id=row["parent_run_id"],
        reason=row["reason"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        owner=row["owner"],
        epoch=row["epoch"],
        lease_until=row["lease_until"],
        agent_version=row.get("agent_version"),
        key=row.get("concurrency_key") or None,
        priority=row.get("priority") or 0,
    )


def create_args(
    info: RunInfo, first_record: bytes, lease_s: float | None = None
) -> tuple[object, ...]:
    """The arguments of `create_run`; the clock is the caller's, as in the SQLite store."""
    return (
        info.run_id,
        info.agent,
        info.status.value,
        info.parent_run_id,
        info.reason,
        clock.now(),
        info.owner,
        info.epoch,
        first_record,
        lease_s,  # NULL + anything is NULL: no lease
        info.agent_version,
        info.key or "",
        info.priority,
    )


class PostgresRuns(RunTable):
    def __init__(self, db: PgPool, on_appended: Callable[[str, int], None]) -> None:
        self._db = db
        # Tells the log's event streams that a status change appended a record.
        self._on_appended = on_appended

    async def create(
        self, info: RunInfo, first_record: bytes, *, lease_s: float | None = None
    ) -> None:
        # One statement inserts the row and seq 0, so a crash never leaves a run without
        # its first record.
        args = create_args(info, first_record, lease_s)
        async with self._db.connection() as conn:
            try:
                created = await conn.fetchval(Q["create_run"], *args)
            except asyncpg.NotNullViolationError as exc:
                # A stray different record at seq 0 of an id with no run row; the statement
                # aborted, so the run row did not land either.
                if exc.column_name != "seq":
                    raise
                raise ConflictingRecord(info.run_id, 0) from None
        if created == 0:
            raise RunExists(info.run_id)

    async def clock(self) -> float:
        rows = await self._db.fetch(Q["clock"])
        now: float = rows[0][0]
        return now

    async def get(self, run_id: str) -> RunInfo | None:
        rows = await self._db.fetch(Q["get_run"], run_id)
        return run_info(rows[0]) if rows else None

    async def set_status(
        self,
        run_id: str,
        status: Status,
        *,
        reason: str | None = None,
        epoch: int | None = None,
        wake_at: float | None = None,
        version: str | None = None,
        record: tuple[int, bytes] | None = None,
    ) -> None:
        args = (run_id, status.value, reason, time.time(), wake_at, version)
        if record is not None:
            await self._set_status_appending(run_id, args, epoch, record)
            return
        await self._update(self._db, run_id, args, epoch)

    async def _set_status_appending(
        self, run_id: str, args: tuple[object, ...], epoch: int | None, record: tuple[int, bytes]
    ) -> None:
        seq, data = record
        async with self._db.connection() as conn:
            try:  # the common resume: one statement
                updated = await conn.fetchval(Q["set_status_appending"], *args, epoch, seq, data)
            except asyncpg.NotNullViolationError as exc:
                if exc.column_name != "seq":
                    raise
                updated = 0  # a different record holds the seq: nothing landed; judged below
        if updated:
            self._on_appended(run_id, seq)
            return
        # Fenced off, unknown or a conflict: step by step, where the judgement has the
        # facts (and raises, rolling the transaction back: neither the status nor the record).
        async with self._db.connection() as conn, conn.transaction():
            await self._update(conn, run_id, args, epoch)
            await append_final(conn, run_id, epoch, record)
        self._on_appended(run_id, seq)

    @staticmethod
    async def _update(
        db: PgPool | PoolConnectionProxy, run_id: str, args: tuple[object, ...], epoch: int | None
    ) -> None:
        """set_status (fenced by `epoch` if given); StaleEpoch or UnknownRun if no row matched."""
        if epoch is None:
            done = await db.execute(Q["set_status"], *args)
        else:
            done = await db.execute(Q["set_status_fenced"], *args, epoch)
        if rowcount(done) == 0:
            if epoch is not None and await db.fetch(Q["run_epoch"], run_id):
                raise StaleEpoch(run_id, epoch)
            raise UnknownRun(run_id)

    async def list(
        self,
        *,
        status: Status | None = None,
        where: RunFilter = EVERY_RUN,
        limit: int = 100,
        offset: int = 0,
    ) -> list[RunInfo]:
        if not where.everything:
            rows = await self._db.fetch(
                Q["list_runs_where"],
                status.value if status else None,
                where.agent,
                where.run_id_prefix,
                where.parent_run_id,
                where.top_level,
                limit,
                offset,
                where.orphaned,
            )
        elif status is None:
            rows = await self._db.fetch(Q["list_runs"], limit, offset)
        else:
            rows = await self._db.fetch(Q["list_runs_by_status"], status.value, limit, offset)
        return [run_info(row) for row in rows]

    async def count_by_status(self) -> dict[Status, int]:
        rows = await self._db.fetch(Q["count_by_status"])
        return {Status(row[0]): int(row[1]) for row in rows}
