"""Forks on SQLite: a fork's row, seq 0, own rows, references and origin in one transaction."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tether.store.base import RunInfo
from tether.store.forks import ForkTable, Origin, Segment, plan_copies
from tether.store.queries import load_queries

if TYPE_CHECKING:
    from tether.store.sqlite import SqliteRuns, _Db

Q = load_queries("sqlite")
F = load_queries("sqlite", "forks.sql")


class SqliteForks(ForkTable):
    def __init__(self, db: _Db, runs: SqliteRuns) -> None:
        self._db = db
        self._runs = runs

    async def create(
        self,
        info: RunInfo,
        first_record: bytes,
        origin: Origin,
        segments: Sequence[Segment],
        entries: Sequence[tuple[int, bytes]] = (),
    ) -> None:
        def work(conn: sqlite3.Connection) -> None:
            self._runs.insert(conn, info, first_record, None)
            for seq, record in entries:
                conn.execute(Q["append"], (info.run_id, seq, record))
            for s in segments:
                conn.execute(F["add_ref"], (info.run_id, s.from_seq, s.to_seq, s.source_run_id))
            conn.execute(F["add_origin"], (info.run_id, origin.source_run_id, origin.source_seq))

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
