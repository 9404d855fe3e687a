"""The workers table on SQLite."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

from tether.store.queries import load_queries
from tether.store.sqlite.dbtime import db_now
from tether.store.workers import WorkerInfo, Workers, served_of

if TYPE_CHECKING:
    from tether.store.sqlite.db import _Db

Q = load_queries("sqlite", "workers.sql")


class SqliteWorkers(Workers):
    def __init__(self, db: _Db) -> None:
        self._db = db

    async def beat(self, info: WorkerInfo) -> None:
        args = {
            "owner": info.owner,
            "host": info.host,
            "pid": info.pid,
            "started_at": info.started_at,
            "ttl": info.ttl,
            "versions": info.versions_json(),
            "runs_held": info.runs_held,
        }

        def work(conn: sqlite3.Connection) -> None:
            now = db_now(conn)  # the database's clock, as leases
            conn.execute(Q["beat"], {**args, "now": now})
            conn.execute(Q["forget_dead"], {"now": now})

        await self._db.call(lambda: self._db.transaction(work))

    async def live(self) -> list[WorkerInfo]:
        rows = await self._db.call(
            lambda: self._db.conn.execute(Q["live"], {"now": db_now(self._db.conn)}).fetchall()
        )
        return [WorkerInfo(r[0], r[1], r[2], r[3], r[4], r[5], served_of(r[6]), r[7]) for r in rows]

    async def leave(self, owner: str) -> None:
        await self._db.call(
            lambda: self._db.transaction(lambda c: c.execute(Q["leave"], {"owner": owner}))
        )
