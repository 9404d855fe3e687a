"""The workers table on PostgreSQL (times by the database's clock, as leases are)."""

from __future__ import annotations

from tether.store.postgres.db import PgPool
from tether.store.queries import load_queries
from tether.store.workers import WorkerInfo, Workers, served_of

Q = load_queries("postgres", "workers.sql")


class PostgresWorkers(Workers):
    def __init__(self, db: PgPool) -> None:
        self._db = db

    async def beat(self, info: WorkerInfo) -> None:
        await self._db.execute(
            Q["beat"],
            info.owner,
            info.host,
            info.pid,
            info.started_at,
            info.ttl,
            info.versions_json(),
            info.runs_held,
        )
        await self._db.execute(Q["forget_dead"])

    async def live(self) -> list[WorkerInfo]:
        rows = await self._db.fetch(Q["live"])
        return [WorkerInfo(r[0], r[1], r[2], r[3], r[4], r[5], served_of(r[6]), r[7]) for r in rows]

    async def leave(self, owner: str) -> None:
        await self._db.execute(Q["leave"], owner)
