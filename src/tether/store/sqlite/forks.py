"""Forks on SQLite: a fork's row, seq 0, own rows, references and origin in one transaction."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tether.store.forks import (
    ForkTable,
    NewRun,
    Origin,
    Segment,
    last_rows,
    plan_copies,
    source_gone,
)
from tether.store.queries import load_queries

if TYPE_CHECKING:
    from tether.store.sqlite import SqliteRuns
    from tether.store.sqlite.db import _Db

Q = load_queries("sqlite")
F = load_queries("sqlite", "forks.sql")


def fork_records(conn: sqlite3.Connection, run_id: str) -> list[bytes]:
    """A fork's record bytes in seq order: its own rows and the rows its references name,
    each read in seq order and put in place by the references' ranges (none for a run that
    references nothing). One read transaction: a delete that copies referenced rows into
    the fork, and moves its references, is seen whole or not at all."""
    conn.execute("BEGIN")
    try:
        own = conn.execute(F["own_rows"], (run_id,)).fetchall()
        out: list[bytes] = []
        i = 0
        for from_seq, to_seq, source in conn.execute(F["segments"], (run_id,)).fetchall():
            while i < len(own) and own[i][0] < from_seq:
                out.append(own[i][1])
                i += 1
            if i < len(own) and own[i][0] <= to_seq:  # never written so: read it merged
                return [r[0] for r in conn.execute(Q["read_all"], (run_id,)).fetchall()]
            out += [r[0] for r in conn.execute(F["range_records"], (source, from_seq, to_seq))]
        out += [record for _, record in own[i:]]
        return out
    finally:
        conn.execute("COMMIT")


class SqliteForks(ForkTable):
    def __init__(self, db: _Db, runs: SqliteRuns) -> None:
        self._db = db
        self._runs = runs

    async def create_runs(self, runs: Sequence[NewRun]) -> None:
        # One writer at a time (BEGIN IMMEDIATE): no delete batch runs between the check of
        # the sources and the references written.
        def work(conn: sqlite3.Connection) -> None:
            for run in runs:
                run_id = run.info.run_id
                for source, seq in last_rows(run.segments):
                    state = conn.execute(F["source_state"], (source, seq)).fetchone()[0]
                    if state:
                        raise source_gone(source, exists=state == 1)
                self._runs.insert(conn, run.info, run.first_record, None)
                conn.executemany(Q["append"], [(run_id, seq, r) for seq, r in run.entries])
                for s in run.segments:
                    conn.execute(F["add_ref"], (run_id, s.from_seq, s.to_seq, s.source_run_id))
                if (o := run.origin) is not None:
                    conn.execute(F["add_origin"], (run_id, o.source_run_id, o.source_seq))

        await self._db.call(lambda: self._db.transaction(work))

    async def rows_at(self, run_id: str, seqs: Sequence[int]) -> dict[int, bytes]:
        args = (run_id, json.dumps(list(seqs)))
        rows = await self._db.call(lambda: self._db.conn.execute(F["rows_at"], args).fetchall())
        return {int(r[0]): bytes(r[1]) for r in rows}

    async def segments(self, run_id: str) -> list[Segment]:
        rows = await self._db.call(
            lambda: self._db.conn.execute(F["segments"], (run_id,)).fetchall()
        )
        return [Segment(int(r[0]), int(r[1]), r[2]) for r in rows]

    async def origins(self, run_ids: Sequence[str]) -> dict[str, Origin]:
        ids = json.dumps(list(run_ids))
        rows = await self._db.call(lambda: self._db.conn.execute(F["origins"], (ids,)).fetchall())
        return {r[0]: Origin(r[1], int(r[2])) for r in rows}

    async def forks_of(self, run_id: str) -> list[str]:
        rows = await self._db.call(
            lambda: self._db.conn.execute(F["forks_of"], (run_id,)).fetchall()
        )
        return [r[0] for r in rows]

    async def detach(self, run_ids: Sequence[str], *, limit: int) -> int:
        ids = json.dumps(list(run_ids))

        def work(conn: sqlite3.Connection) -> int:
            copies = plan_copies(conn.execute(F["refs_to"], (ids, limit)).fetchall(), limit)
            for c in copies:
                conn.execute(F["copy_rows"], (c.run_id, c.source_run_id, c.from_seq, c.to_seq))
                if c.rest_from is None:
                    conn.execute(F["drop_ref"], (c.run_id, c.from_seq))
                else:
                    conn.execute(F["shrink_ref"], (c.run_id, c.from_seq, c.rest_from))
            return sum(c.to_seq - c.from_seq + 1 for c in copies)

        return await self._db.call(lambda: self._db.transaction(work))
