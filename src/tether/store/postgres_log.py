"""The run log on PostgreSQL: one statement per append, fenced in that same statement."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from tether.errors import ConflictingRecord, StaleEpoch, StoreError
from tether.store.base import AppendListener, LogListener, LogStore
from tether.store.postgres_db import PgPool, rowcount
from tether.store.postgres_listen import AppendNotifier, PostgresLogListener
from tether.store.queries import load_queries

Q = load_queries("postgres")


def _unique(run_id: str, entries: Sequence[tuple[int, bytes]]) -> Sequence[tuple[int, bytes]]:
    """Drop repeats of an identical (seq, record); a seq given two records is a conflict.

    One INSERT cannot touch a row twice, so repeats are settled here, as SQLite's
    row-by-row append settles them.
    """
    if len(entries) < 2:
        return entries
    seen: dict[int, bytes] = {}
    for seq, record in entries:
        if seen.setdefault(seq, record) != record:
            raise ConflictingRecord(run_id, seq)
    return entries if len(seen) == len(entries) else list(seen.items())


class PostgresLog(LogStore):
    def __init__(self, db: PgPool) -> None:
        self._db = db
        self._notifier = AppendNotifier(db)

    async def close(self) -> None:
        """Send the notifications still pending, then stop the notifier."""
        await self._notifier.close()

    async def append(
        self, run_id: str, entries: Sequence[tuple[int, bytes]], *, epoch: int | None = None
    ) -> None:
        entries = _unique(run_id, entries)
        if not entries:
            return
        seqs = [seq for seq, _ in entries]
        records = [record for _, record in entries]
        conflict = False
        async with self._db.connection() as conn:
            try:
                if epoch is None:
                    status = await conn.execute(Q["append"], run_id, seqs, records)
                else:
                    status = await conn.execute(Q["append_fenced"], run_id, seqs, records, epoch)
            except asyncpg.NotNullViolationError as exc:
                if exc.column_name != "seq":
                    raise
                # The statement's signal that a different record holds one of these seqs:
                # it aborted, so nothing of this call landed. Find the seq to name it.
                conflict, status = True, "INSERT 0 0"
            if rowcount(status) == len(entries):
                self._notifier.note(run_id, seqs[-1])
                return
            # The slow path, only for retries, conflicts and fenced-off appends.
            rows = await conn.fetch(Q["records_at"], run_id, seqs)
            stored: dict[int, bytes] = {row[0]: row[1] for row in rows}
            # Not a retry: if the run changed hands, the new owner may already have written
            # these seqs; the reason to report (and stop on) is the fence.
            retry = all(stored.get(s) == r for s, r in entries)
            if epoch is not None and not retry:
                current = await conn.fetchval(Q["run_epoch"], run_id)
                if current != epoch:
                    raise StaleEpoch(run_id, epoch)
        # Judge entries in order, as SQLite's row-by-row append does.
        for seq, record in entries:
            old = stored.get(seq)
            if old is None and not conflict:
                # The insert skipped a free seq: only a failed fence does that.
                raise (
                    StaleEpoch(run_id, epoch)
                    if epoch is not None
                    else StoreError(
                        f"run {run_id}: the append of seq {seq} was skipped without a conflict"
                    )
                )
            if old is not None and old != record:
                raise ConflictingRecord(run_id, seq)
        if conflict:
            raise StoreError(f"run {run_id}: an append conflicted, yet no seq holds another record")

    async def read(self, run_id: str, *, after_seq: int = -1) -> list[tuple[int, bytes]]:
        rows = await self._db.fetch(Q["read"], run_id, after_seq)
        return [(row[0], row[1]) for row in rows]

    async def read_all(self, run_id: str) -> list[bytes]:
        rows = await self._db.fetch(Q["read_all"], run_id)
        return [row[0] for row in rows]

    def listener(self, on_append: AppendListener) -> LogListener:
        return PostgresLogListener(self._db, on_append)
