"""The run log on PostgreSQL: one statement per append (or per group of runs' appends, see
`postgres_group`), fenced in that same statement."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from operator import itemgetter

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from tether.foundation.errors import ConflictingRecord
from tether.store.base import AppendListener, LogListener, LogStore
from tether.store.judgement import AppendFacts, check_consecutive, judge_append
from tether.store.postgres.db import PgPool, refused, rowcount
from tether.store.postgres.group import Append, GroupCommit, append_together
from tether.store.postgres.lanes import AppendLanes
from tether.store.postgres.listen import PostgresLogListener
from tether.store.postgres.notify import AppendNotifier
from tether.store.queries import load_queries

Q = load_queries("postgres")
_SEQ = itemgetter(0)
# The command tag of an append that inserted its one row: the common outcome, compared
# instead of parsed.
_ONE_ROW = "INSERT 0 1"


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


async def append_final(
    conn: PoolConnectionProxy, run_id: str, epoch: int | None, entry: tuple[int, bytes]
) -> None:
    """Append one record in the caller's transaction (a finish, a resume), fenced by `epoch`
    if given; raise what `judge_append` finds wrong (leaving the transaction rolls it back)."""
    seq, record = entry
    if epoch is None:
        done = await conn.execute(Q["append_final"], run_id, seq, record)
    else:
        done = await conn.execute(Q["append_final_fenced"], run_id, seq, record, epoch)
    inserted = rowcount(done)
    if inserted:
        return
    rows = await conn.fetch(Q["records_at"], run_id, [seq])
    current = last = None
    if epoch is not None:
        current = await conn.fetchval(Q["run_epoch"], run_id)
        last = await conn.fetchval(Q["last_seq"], run_id)
    facts = AppendFacts(inserted, {r[0]: r[1] for r in rows}, current, last)
    judge_append(run_id, [entry], epoch, facts)


class PostgresLog(LogStore):
    def __init__(self, db: PgPool) -> None:
        self._db = db
        self._notifier = AppendNotifier(db)
        # Appends of many runs share one statement while others are in flight.
        # Appends run on connections of their own, outside the pool.
        self._lanes = AppendLanes(db, db.group_commit)
        self._group: GroupCommit[Append] = GroupCommit(
            self._insert,
            lambda batch: append_together(self._lanes, batch),
            "appends",
            statements=db.group_commit,
        )

    def appended(self, run_id: str, seq: int) -> None:
        """Note records up to `seq` appended by another statement (a run's finish)."""
        self._notifier.note(run_id, seq)

    async def close(self) -> None:
        """Send the notifications still pending, then stop the notifier."""
        await self._notifier.close()
        await self._lanes.close()

    async def append(
        self, run_id: str, entries: Sequence[tuple[int, bytes]], *, epoch: int | None = None
    ) -> None:
        group = self._group
        if len(entries) == 1 and group.enter():
            # A node's record while a statement may go out alone: most appends. Sent from
            # here, as `_insert` would, without a waiter, its lists or the group's coroutine.
            seq, record = entries[0]
            try:
                got = await self._one(run_id, seq, record, epoch)
            finally:
                group.leave()
            if got == _ONE_ROW:
                self._notifier.note(run_id, seq)
                return
            await self._judge(run_id, entries, [seq], epoch, self._inserted(got))
            return
        if epoch is not None:  # the statement checks that the first follows the log
            check_consecutive(run_id, entries)
        else:
            entries = _unique(run_id, entries)
        if not entries:
            return
        if len(entries) == 1:
            seq, record = entries[0]
            seqs, records = [seq], [record]
        else:
            seqs = [seq for seq, _ in entries]
            records = [record for _, record in entries]
        inserted = await group.submit(Append(run_id, seqs, records, epoch))
        if inserted == len(entries):
            self._notifier.note(run_id, seqs[-1])
            return
        await self._judge(run_id, entries, seqs, epoch, inserted)

    async def _judge(
        self,
        run_id: str,
        entries: Sequence[tuple[int, bytes]],
        seqs: list[int],
        epoch: int | None,
        inserted: int,
    ) -> None:
        """After an append that inserted fewer rows than it carried: the slow path, only
        for retries, conflicts, fenced-off appends and appends that do not follow the log
        (`judge_append` decides)."""
        current = last = None
        async with self._db.connection() as conn:
            rows = await conn.fetch(Q["records_at"], run_id, seqs)
            if epoch is not None:
                current = await conn.fetchval(Q["run_epoch"], run_id)
                last = await conn.fetchval(Q["last_seq"], run_id)
        judge_append(
            run_id, entries, epoch, AppendFacts(inserted, {r[0]: r[1] for r in rows}, current, last)
        )
        if inserted:  # a retry that overlapped what had landed and added the rest
            self._notifier.note(run_id, seqs[-1])

    async def _insert(self, a: Append) -> int:
        """One run's append in one statement; the rows it inserted (0: nothing landed)."""
        run_id, seqs, records, epoch = a.run_id, a.seqs, a.records, a.epoch
        if len(seqs) != 1:
            if epoch is None:
                got = await self._lanes.execute(Q["append"], run_id, seqs, records)
            else:
                got = await self._lanes.execute(Q["append_fenced"], run_id, seqs, records, epoch)
        else:
            got = await self._one(run_id, seqs[0], records[0], epoch)
        return self._inserted(got)

    def _one(
        self, run_id: str, seq: int, record: bytes, epoch: int | None
    ) -> Awaitable[str | asyncpg.PostgresError]:
        """One record's statement on a lane: a VALUES row, cheaper than unnest."""
        if epoch is None:
            return self._lanes.execute(Q["append_one"], run_id, seq, record)
        return self._lanes.execute(Q["append_one_fenced"], run_id, seq, record, epoch)

    def _inserted(self, got: str | asyncpg.PostgresError) -> int:
        """The rows an append statement inserted (0: nothing landed), from its command tag;
        a refusal other than the taken-seq signal comes out as tether's error."""
        if isinstance(got, str):
            return rowcount(got)
        if isinstance(got, asyncpg.UniqueViolationError) or (
            isinstance(got, asyncpg.NotNullViolationError) and got.column_name == "seq"
        ):
            # A taken seq (one record's plain INSERT: any record; several records' ON
            # CONFLICT: a different one): the statement aborted, nothing of it landed.
            return 0
        raise refused(self._db.where, got) from got

    async def read(self, run_id: str, *, after_seq: int = -1) -> list[tuple[int, bytes]]:
        return [(row[0], row[1]) for row in await self._read(run_id, after_seq)]

    async def read_all(self, run_id: str) -> list[bytes]:
        rows = await self._db.fetch(Q["read_all"], run_id)
        rows.sort(key=_SEQ)  # they come nearly in order: a pass that finds them so
        return [row[1] for row in rows]

    async def _read(self, run_id: str, after_seq: int) -> list[asyncpg.Record]:
        """The run's (seq, record) rows after `after_seq` in seq order. They come in pieces
        (its own rows, each range it references), each nearly in seq order, so this sort is
        mostly merging runs."""
        rows = await self._db.fetch(Q["read"], run_id, after_seq)
        rows.sort(key=_SEQ)
        return rows

    def listener(self, on_append: AppendListener) -> LogListener:
        return PostgresLogListener(self._db, on_append)
