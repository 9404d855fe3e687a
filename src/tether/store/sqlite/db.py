"""The SQLite connection: one connection owned by one thread, and its transactions."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from tether.foundation.errors import StoreError, StoreFull

T = TypeVar("T")


# SQLITE_FULL: "database or disk is full" (the file system, or `PRAGMA max_page_count`).
_SQLITE_FULL = 13


def _full(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return bool(code & 0xFF == _SQLITE_FULL)
    return "database or disk is full" in str(exc)


class _Db:
    """One connection owned by one thread: sqlite3 objects must stay on their thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tether-sqlite")
        self._conn: sqlite3.Connection | None = None

    def _connect(self) -> None:
        if self._conn is not None:  # migrate() before open() connected already
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=True)
        conn.execute("PRAGMA journal_mode=WAL")
        # FULL makes each commit fsync the WAL: a recorded node survives a power cut.
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA busy_timeout=5000")
        self._conn = conn

    @property
    def conn(self) -> sqlite3.Connection:
        assert self._conn is not None, "store is not open"
        return self._conn

    async def call(self, fn: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool, fn)
        except sqlite3.Error as exc:
            if _full(exc):
                raise StoreFull(f"sqlite:///{self.path}", str(exc)) from exc
            raise StoreError(f"sqlite {self.path}: {exc}") from exc

    def transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn)
            conn.execute("COMMIT")
        except BaseException:
            # SQLite may have rolled back already (SQLITE_FULL, an I/O error): a ROLLBACK
            # then would fail and hide why; a failed COMMIT leaves it open otherwise.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return result

    async def open(self) -> None:
        await self.call(self._connect)

    async def close(self) -> None:
        if self._conn is not None:
            await self.call(self.conn.close)
            self._conn = None
        self._pool.shutdown(wait=True)
