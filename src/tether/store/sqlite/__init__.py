"""The embedded default store: one SQLite file in WAL mode, durable commits."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tether.foundation import clock
from tether.foundation.errors import (
    RunExists,
    StaleEpoch,
    StoreNotReady,
    UnknownRun,
)
from tether.store.base import EVERY_RUN, LogStore, RunFilter, RunInfo, RunTable, Status, Store
from tether.store.queries import load_migrations, load_queries
from tether.store.sqlite.append import append_rows
from tether.store.sqlite.db import _Db
from tether.store.sqlite.dbtime import db_now
from tether.store.sqlite.flow import SqliteLimits, SqliteRates, SqliteSchedules
from tether.store.sqlite.forks import SqliteForks, fork_records
from tether.store.sqlite.keys import SqliteKeys
from tether.store.sqlite.leases import SqliteLeases
from tether.store.sqlite.retention import SqliteRetention
from tether.store.sqlite.workers import SqliteWorkers

Q = load_queries("sqlite")


class SqliteLog(LogStore):
    def __init__(self, db: _Db) -> None:
        self._db = db

    async def append(
        self, run_id: str, entries: Sequence[tuple[int, bytes]], *, epoch: int | None = None
    ) -> None:
        def work(conn: sqlite3.Connection) -> None:
            # Raising rolls back what this call inserted: all or none.
            append_rows(conn, run_id, entries, epoch)

        await self._db.call(lambda: self._db.transaction(work))

    async def read(self, run_id: str, *, after_seq: int = -1) -> list[tuple[int, bytes]]:
        rows = await self._db.call(
            lambda: self._db.conn.execute(Q["read"], (run_id, after_seq)).fetchall()
        )
        return [(int(seq), bytes(record)) for seq, record in rows]

    async def read_all(self, run_id: str) -> list[bytes]:
        def work() -> list[bytes]:
            conn = self._db.conn
            rows = conn.execute(Q["read_all_own"], (run_id,)).fetchall()
            if rows:
                return [r[0] for r in rows]
            # A fork (its seq 0 is its own, so it has rows), or an unknown run (nothing).
            return fork_records(conn, run_id)

        return await self._db.call(work)


def _info(row: Any) -> RunInfo:
    return RunInfo(
        run_id=row[0],
        agent=row[1],
        status=Status(row[2]),
        parent_run_id=row[3],
        reason=row[4],
        created_at=row[5],
        updated_at=row[6],
        owner=row[7],
        epoch=row[8],
        lease_until=row[9],
        agent_version=row[10] if len(row) > 10 else None,
        key=(row[11] or None) if len(row) > 11 else None,
        priority=row[12] if len(row) > 12 else 0,
    )


class SqliteRuns(RunTable):
    def __init__(self, db: _Db) -> None:
        self._db = db

    async def create(
        self, info: RunInfo, first_record: bytes, *, lease_s: float | None = None
    ) -> None:
        def work(conn: sqlite3.Connection) -> None:
            self.insert(conn, info, first_record, lease_s)

        await self._db.call(lambda: self._db.transaction(work))

    def insert(
        self, conn: sqlite3.Connection, info: RunInfo, first_record: bytes, lease_s: float | None
    ) -> None:
        """Insert the run's row and seq 0 in the caller's transaction (RunExists if taken)."""
        now = clock.now()  # creation time orders claims; tests set it
        lease_until = None if lease_s is None else db_now(conn) + lease_s
        try:
            conn.execute(
                Q["create_run"],
                (
                    info.run_id,
                    info.agent,
                    info.status.value,
                    info.parent_run_id,
                    info.reason,
                    now,
                    now,
                    info.owner,
                    info.epoch,
                    lease_until,
                    info.agent_version,
                    info.key or "",
                    info.priority,
                ),
            )
        except sqlite3.IntegrityError:
            raise RunExists(info.run_id) from None
        conn.execute(Q["append"], (info.run_id, 0, first_record))

    async def get(self, run_id: str) -> RunInfo | None:
        row = await self._db.call(lambda: self._db.conn.execute(Q["get_run"], (run_id,)).fetchone())
        return None if row is None else _info(row)

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
        def work(conn: sqlite3.Connection) -> str:
            args = (status.value, reason, time.time(), wake_at, version, run_id)
            if epoch is None:
                done = conn.execute(Q["set_status"], args).rowcount
            else:
                done = conn.execute(Q["set_status_fenced"], (*args, epoch)).rowcount
            if not done:
                return "stale" if conn.execute(Q["run_epoch"], (run_id,)).fetchone() else "unknown"
            if record is not None:  # raising rolls the status back too
                append_rows(conn, run_id, [record], epoch)
            return "ok"

        if record is None:  # one statement: no transaction of its own
            outcome = await self._db.call(lambda: work(self._db.conn))
        else:
            outcome = await self._db.call(lambda: self._db.transaction(work))
        if outcome == "stale":
            raise StaleEpoch(run_id, epoch or 0)
        if outcome == "unknown":
            raise UnknownRun(run_id)

    async def list(
        self,
        *,
        status: Status | None = None,
        where: RunFilter = EVERY_RUN,
        limit: int = 100,
        offset: int = 0,
    ) -> list[RunInfo]:
        def work() -> list[Any]:
            if not where.everything:
                args = {
                    "status": status.value if status else None,
                    "agent": where.agent,
                    "prefix": where.run_id_prefix,
                    "parent": where.parent_run_id,
                    "top": int(where.top_level),
                    "orphaned": None if where.orphaned is None else int(where.orphaned),
                    "now": db_now(self._db.conn),  # leases are timed by the database's clock
                    "limit": limit,
                    "offset": offset,
                }
                return self._db.conn.execute(Q["list_runs_where"], args).fetchall()
            if status is None:
                return self._db.conn.execute(Q["list_runs"], (limit, offset)).fetchall()
            return self._db.conn.execute(
                Q["list_runs_by_status"], (status.value, limit, offset)
            ).fetchall()

        return [_info(r) for r in await self._db.call(work)]

    async def clock(self) -> float:
        return await self._db.call(lambda: db_now(self._db.conn))

    async def count_by_status(self) -> dict[Status, int]:
        rows = await self._db.call(lambda: self._db.conn.execute(Q["count_by_status"]).fetchall())
        return {Status(status): int(n) for status, n in rows}


class SqliteStore(Store):
    """`sqlite:///relative/path.db` or `sqlite:////absolute/path.db`."""

    # Its statements run on one thread that needs the interpreter's lock between SQLite's
    # calls: a take sent before a run's build ended 1.7-3 ms after it, and a fresh
    # `tether resume` of 5,000 nodes took 13.5 / 13.7 ms so, 12.7 / 13.3 ms read, built,
    # then taken (medians of 7 and of 12, the two in turns).
    io_beside_work = False

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.url = f"sqlite:///{self.path}"
        self._db = _Db(self.path)
        self.log = SqliteLog(self._db)
        self.runs = SqliteRuns(self._db)
        self.leases = SqliteLeases(self._db)
        self.retention = SqliteRetention(self._db, _info)
        self.forks = SqliteForks(self._db, self.runs)
        self.workers = SqliteWorkers(self._db)
        self.rates = SqliteRates(self._db)
        self.keys = SqliteKeys(self._db)
        self.limits = SqliteLimits(self._db)
        self.schedules = SqliteSchedules(self._db)

    async def open(self) -> None:
        await self._db.open()
        await self.migrate()

    async def open_existing(self) -> None:
        if not self.path.is_file():
            raise StoreNotReady(
                f"no tether store at {self.path} (sqlite); a command that records runs "
                "(`tether demo`, `tether submit`, `tether db migrate`) creates it, or point "
                "--db / TETHER_DATABASE_URL / TETHER_DATA_DIR at an existing one"
            )
        await self._db.open()
        wanted = {mig.version for mig in load_migrations("sqlite")}

        def applied() -> set[int]:
            conn = self._db.conn
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
            ).fetchone()
            if found is None:
                return set()
            return {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}

        if missing := wanted - await self._db.call(applied):
            await self.close()
            raise StoreNotReady(
                f"the tether store at {self.path} lacks migrations {sorted(missing)}; "
                f"run `tether db migrate --db {self.url}`"
            )

    async def close(self) -> None:
        await self._db.close()

    async def migrate(self) -> list[str]:
        if self._db._conn is None:  # called before open(), as by `tether db migrate`
            await self._db.open()

        def work(conn: sqlite3.Connection) -> list[str]:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
            done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
            applied = []
            for mig in load_migrations("sqlite"):
                if mig.version in done:
                    continue
                for statement in mig.sql.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations VALUES (?, ?, ?)",
                    (mig.version, mig.name, time.time()),
                )
                applied.append(mig.name)
            return applied

        return await self._db.call(lambda: self._db.transaction(work))
