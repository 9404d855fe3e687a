"""Per-run data keys on SQLite."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tether.store.keys import KeyRow, RunKeys
from tether.store.queries import load_queries
from tether.store.sqlite.flow import _write

if TYPE_CHECKING:
    from tether.store.sqlite.db import _Db

Q = load_queries("sqlite", "keys.sql")


class SqliteKeys(RunKeys):
    def __init__(self, db: _Db) -> None:
        self._db = db

    async def put(self, run_id: str, wrapped: bytes) -> bool:
        args = {"run_id": run_id, "wrapped": wrapped, "now": time.time()}
        return await _write(self._db, Q["put"], args) > 0

    async def get(self, run_ids: Sequence[str]) -> dict[str, KeyRow]:
        ids = json.dumps(list(run_ids))
        rows = await self._db.call(lambda: self._db.conn.execute(Q["get"], {"ids": ids}).fetchall())
        return {r[0]: KeyRow(r[0], None if r[1] is None else bytes(r[1]), r[2]) for r in rows}

    async def kept(self) -> list[KeyRow]:
        rows = await self._db.call(lambda: self._db.conn.execute(Q["kept"]).fetchall())
        return [KeyRow(r[0], bytes(r[1]), r[2]) for r in rows]

    async def rewrap(self, run_id: str, old: bytes, new: bytes) -> bool:
        args = {"run_id": run_id, "old": old, "new": new}
        return await _write(self._db, Q["rewrap"], args) > 0

    async def shred(self, run_ids: Sequence[str]) -> int:
        args = {"ids": json.dumps(list(run_ids)), "now": time.time()}
        return await _write(self._db, Q["shred"], args)
