"""Leases on SQLite: the embedded mode runs one worker process, which polls for work."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tether.foundation.errors import StaleEpoch
from tether.store.base import Claim, Leases, Renewal, Serves, Status, Stranded
from tether.store.queries import load_queries
from tether.store.sqlite.append import append_rows
from tether.store.sqlite.dbtime import db_now

if TYPE_CHECKING:
    from tether.store.sqlite.db import _Db

Q = load_queries("sqlite")
LQ = load_queries("sqlite", "limits.sql")
# SQLite has no LISTEN/NOTIFY, and another process (`tether submit`) may queue a run,
# so an idle worker looks again this often.
POLL_S = 0.2


class SqliteLeases(Leases):
    def __init__(self, db: _Db) -> None:
        self._db = db
        self._woken = asyncio.Event()

    async def claim(
        self,
        owner: str,
        limit: int,
        ttl: float,
        *,
        skip: Sequence[str] = (),
        serves: Serves | None = None,
    ) -> list[Claim]:
        if limit <= 0:
            return []
        args = {
            "owner": owner,
            "ttl": ttl,
            "limit": limit,
            "skip": json.dumps(list(skip)),
            "pinned": int(serves is not None),
            "serves": _pairs(serves),
            "also": json.dumps(list(serves.also) if serves is not None else []),
        }

        def work(conn: sqlite3.Connection) -> list[Claim]:
            args["now"] = db_now(conn)  # the database's clock judges the leases
            if not conn.execute(LQ["claim_mode"]).fetchone()[0]:
                rows = conn.execute(Q["claim"], args).fetchall()
                return [Claim(r[0], r[1], bool(r[2])) for r in rows]
            # Flow control is on: pick in its order, then claim those (one transaction).
            ids = [r[0] for r in conn.execute(LQ["claim_flow"], args).fetchall()]
            rows = conn.execute(LQ["claim_picked"], {**args, "ids": json.dumps(ids)}).fetchall()
            claimed = {r[0]: Claim(r[0], r[1], bool(r[2])) for r in rows}
            return [claimed[run_id] for run_id in ids if run_id in claimed]

        return await self._db.call(lambda: self._db.transaction(work))

    async def stranded(self, serves: Serves, skip: Sequence[str], limit: int) -> list[Stranded]:
        args = {
            "skip": json.dumps(list(skip)),
            "serves": _pairs(serves),
            "limit": limit,
        }

        def work() -> list[sqlite3.Row]:
            conn = self._db.conn
            return conn.execute(Q["stranded"], {**args, "now": db_now(conn)}).fetchall()

        rows = await self._db.call(work)
        return [Stranded(r[0], r[1], r[2]) for r in rows]

    async def renew(self, owner: str, held: Sequence[Claim], ttl: float) -> Renewal:
        def work(conn: sqlite3.Connection) -> Renewal:
            until = db_now(conn) + ttl
            lost, cancel = [], []
            for c in held:
                row = conn.execute(Q["renew"], (until, c.run_id, c.epoch, owner)).fetchone()
                if row is None:
                    lost.append(c.run_id)
                elif row[0]:
                    cancel.append(c.run_id)
            return Renewal(lost, cancel)

        return await self._db.call(lambda: self._db.transaction(work))

    async def release(
        self,
        run_id: str,
        epoch: int | None,
        status: Status,
        reason: str | None = None,
        *,
        final: tuple[int, bytes] | None = None,
        wake_at: float | None = None,
    ) -> bool:
        def work(conn: sqlite3.Connection) -> bool:
            if final is not None:
                append_rows(conn, run_id, [final], epoch)
            args = (status.value, reason, db_now(conn), wake_at, run_id)
            if epoch is None:
                return conn.execute(Q["release_unfenced"], args).rowcount == 1
            return conn.execute(Q["release"], (*args, epoch)).rowcount == 1

        return await self._db.call(lambda: self._db.transaction(work))

    async def adopt_child(
        self, run_id: str, owner: str, parent_run_id: str, parent_epoch: int
    ) -> int:
        args = {
            "owner": owner,
            "run_id": run_id,
            "parent": parent_run_id,
            "parent_epoch": parent_epoch,
        }

        def work(conn: sqlite3.Connection) -> int | None:
            row = conn.execute(Q["adopt_child"], {**args, "now": db_now(conn)}).fetchone()
            return None if row is None else int(row[0])

        epoch = await self._db.call(lambda: self._db.transaction(work))
        if epoch is None:
            raise StaleEpoch(parent_run_id, parent_epoch)
        return epoch

    async def take(
        self, run_id: str, owner: str, ttl: float, *, force: bool = False
    ) -> Claim | None:
        args = {"owner": owner, "ttl": ttl, "run_id": run_id}

        def work(conn: sqlite3.Connection) -> Claim | None:
            query = Q["take_force" if force else "take"]
            row = conn.execute(query, {**args, "now": db_now(conn)}).fetchone()
            return None if row is None else Claim(run_id, int(row[0]), bool(row[1]))

        return await self._db.call(lambda: self._db.transaction(work))

    async def reopen(self, run_id: str, owner: str, ttl: float) -> Claim | None:
        args = {"owner": owner, "now": time.time(), "ttl": ttl, "run_id": run_id}

        def work(conn: sqlite3.Connection) -> Claim | None:
            row = conn.execute(Q["reopen"], args).fetchone()
            return None if row is None else Claim(run_id, int(row[0]), bool(row[1]))

        return await self._db.call(lambda: self._db.transaction(work))

    async def request_cancel(self, run_id: str) -> Status | None:
        def work(conn: sqlite3.Connection) -> Status | None:
            row = conn.execute(Q["request_cancel"], (run_id,)).fetchone()
            return None if row is None else Status(row[0])

        return await self._db.call(lambda: self._db.transaction(work))

    async def next_wake(self) -> float | None:
        def work() -> float | None:
            conn = self._db.conn
            row = conn.execute(Q["next_wake"]).fetchone()
            return None if row is None or row[0] is None else float(row[0]) - db_now(conn)

        return await self._db.call(work)

    async def notify(self) -> None:
        self._woken.set()

    async def wait_for_work(self, max_wait: float) -> None:
        try:
            await asyncio.wait_for(self._woken.wait(), min(max_wait, POLL_S))
        except TimeoutError:
            return
        finally:
            self._woken.clear()


def _pairs(serves: Serves | None) -> str:
    """`serves` as the JSON array of [agent, version] pairs the SQL reads."""
    return json.dumps([] if serves is None else [list(p) for p in serves.versions.items()])
