"""Per-run data keys on PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence

from tether.store.keys import KeyRow, RunKeys
from tether.store.postgres.db import PgPool
from tether.store.queries import load_queries

Q = load_queries("postgres", "keys.sql")


class PostgresKeys(RunKeys):
    def __init__(self, db: PgPool) -> None:
        self._db = db

    async def put(self, run_id: str, wrapped: bytes) -> bool:
        return (await self._db.execute(Q["put"], run_id, wrapped)).endswith(" 1")

    async def get(self, run_ids: Sequence[str]) -> dict[str, KeyRow]:
        rows = await self._db.fetch(Q["get"], list(run_ids))
        return {r[0]: KeyRow(r[0], None if r[1] is None else bytes(r[1]), r[2]) for r in rows}

    async def kept(self) -> list[KeyRow]:
        return [KeyRow(r[0], bytes(r[1]), r[2]) for r in await self._db.fetch(Q["kept"])]

    async def rewrap(self, run_id: str, old: bytes, new: bytes) -> bool:
        return (await self._db.execute(Q["rewrap"], run_id, old, new)).endswith(" 1")

    async def shred(self, run_ids: Sequence[str]) -> int:
        return int((await self._db.execute(Q["shred"], list(run_ids))).split()[-1])
