"""Retention on SQLite: JSON arrays carry id lists, a file lock is the advisory lock."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

from tether.store.base import RunInfo, Status
from tether.store.queries import load_queries
from tether.store.retention import FINISHED, Retention, Rows

if TYPE_CHECKING:
    from tether.store.sqlite.db import _Db

Q = load_queries("sqlite")
F = load_queries("sqlite", "forks.sql")


class SqliteRetention(Retention):
    def __init__(self, db: _Db, info_of: Callable[[Any], RunInfo]) -> None:
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
        args = {
            "statuses": json.dumps([s.value for s in statuses]),
            "before": before,
            "agent": agent,
            "after_t": after[0],
            "after_id": after[1],
            "limit": limit,
        }
        rows = await self._db.call(lambda: self._db.conn.execute(Q["expired"], args).fetchall())
        return [self._info(r) for r in rows]

    async def families(self, run_ids: Sequence[str]) -> list[RunInfo]:
        ids = json.dumps(list(run_ids))
        rows = await self._db.call(lambda: self._db.conn.execute(Q["families"], (ids,)).fetchall())
        return [self._info(r) for r in rows]

    async def log_size(self, run_ids: Sequence[str]) -> Rows:
        ids = json.dumps(list(run_ids))
        rows, size = await self._db.call(
            lambda: self._db.conn.execute(Q["log_size"], (ids,)).fetchone()
        )
        return Rows(int(rows), int(size))

    async def delete_log(self, run_ids: Sequence[str], *, limit: int) -> Rows | None:
        ids = json.dumps(list(run_ids))

        # One writer at a time (BEGIN IMMEDIATE): no fork is created between the check and
        # the delete.
        def work(conn: sqlite3.Connection) -> Rows | None:
            if conn.execute(F["referenced"], (ids,)).fetchone()[0]:
                return None
            sizes = conn.execute(Q["delete_log"], (ids, limit)).fetchall()
            return Rows(len(sizes), sum(int(s[0]) for s in sizes))

        return await self._db.call(lambda: self._db.transaction(work))

    async def seal(self, run_ids: Sequence[str]) -> int:
        ids = json.dumps(list(run_ids))

        def work(conn: sqlite3.Connection) -> int:
            return len(conn.execute(Q["seal"], (ids,)).fetchall())

        return await self._db.call(lambda: self._db.transaction(work))

    async def unseal(self, run_ids: Sequence[str]) -> None:
        ids = json.dumps(list(run_ids))
        await self._db.call(lambda: self._db.transaction(lambda c: c.execute(Q["unseal"], (ids,))))

    async def delete_runs(self, run_ids: Sequence[str]) -> int:
        ids = json.dumps(list(run_ids))

        def work(conn: sqlite3.Connection) -> int:
            gone = [row[0] for row in conn.execute(Q["delete_runs"], (ids,)).fetchall()]
            for run_id in gone:  # whoever referenced them had their rows copied first
                conn.execute(Q["delete_refs"], (run_id,))
                conn.execute(Q["delete_origin"], (run_id,))
            return len(gone)

        return await self._db.call(lambda: self._db.transaction(work))

    @contextlib.asynccontextmanager
    async def exclusive(self, name: str) -> AsyncIterator[bool]:
        # Every process on this store opens the same file beside the database; the kernel
        # drops the lock when its holder dies, so a killed worker never leaves it taken.
        path = self._db.path.with_name(f"{self._db.path.name}.{name}.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
