"""The production store: PostgreSQL through asyncpg, for many replicas sharing one database.

`postgresql://user@host:5432/db?min_size=1&max_size=10` (pool sizes may also be given as
keyword arguments, which win). `open()` applies pending migrations, then fills the pool.

Why asyncpg: `bench/pg_drivers.py` measured both drivers on the same machine in one run,
on the statements this store ships (PostgreSQL 15 on loopback, 2 cores, fsync on; asyncpg
0.32 with its per-release `RESET ALL` turned off, psycopg 3.3 in autocommit with
`prepare_threshold=0` and binary parameters; p50 / p99 in ms, best of two interleaved
rounds; three runs put the single-row ratios within about +-0.15x of these):

    statement                      psycopg 3         asyncpg    psycopg/asyncpg
    append, 1 x 300 B           0.452 / 2.514    0.331 / 0.491       1.36x
    bare INSERT (floor)         0.371 / 0.816    0.315 / 0.634       1.18x
    fenced append (FOR SHARE)   0.488 / 0.681    0.307 / 0.510       1.59x
    replay 5,000 rows           4.393 / 15.80    2.133 / 11.91       2.06x
    append, 64 rows             1.213 / 1.882    0.645 / 0.854       1.88x

asyncpg is faster on every line, and by about 2x where tether spends its time in bulk
(replay and group commit: its binary codecs build bytes and arrays in C). Its append,
fenced or not, sits at the bare INSERT floor (within noise), so nothing is gained by
paying psycopg's overhead for its wider ecosystem.

asyncpg prepares and caches each statement per connection; behind PgBouncer in
transaction mode pass `statement_cache_size=0` in the URL's query string.
"""

from __future__ import annotations

import asyncpg

from tether.foundation.errors import StoreNotReady
from tether.store.base import Store
from tether.store.postgres.db import PgPool, wrap_errors
from tether.store.postgres.flow import PostgresLimits, PostgresRates, PostgresSchedules
from tether.store.postgres.forks import PostgresForks
from tether.store.postgres.keys import PostgresKeys
from tether.store.postgres.leases import PostgresLeases
from tether.store.postgres.log import PostgresLog
from tether.store.postgres.partitions import log_partitions, partition_log
from tether.store.postgres.retention import PostgresRetention
from tether.store.postgres.runs import PostgresRuns, run_info
from tether.store.postgres.workers import PostgresWorkers
from tether.store.queries import load_migrations, load_queries

Q = load_queries("postgres")


class PostgresStore(Store):
    """`postgresql://` or `postgres://` URLs."""

    def __init__(self, url: str, *, min_size: int | None = None, max_size: int | None = None):
        self.url = url
        self._db = PgPool(url, min_size=min_size, max_size=max_size)
        self._log = PostgresLog(self._db)
        self.log = self._log
        self.runs = PostgresRuns(self._db, self._log.appended)
        self._leases = PostgresLeases(self._db, self._log.appended)
        self.leases = self._leases
        self.retention = PostgresRetention(self._db, run_info)
        self.forks = PostgresForks(self._db)
        self.workers = PostgresWorkers(self._db)
        self.rates = PostgresRates(self._db)
        self.keys = PostgresKeys(self._db)
        self.limits = PostgresLimits(self._db)
        self.schedules = PostgresSchedules(self._db)

    @property
    def pool_size(self) -> tuple[int, int]:
        """(min_size, max_size) of the connection pool."""
        return self._db.min_size, self._db.max_size

    async def open(self) -> None:
        # Most opens find the schema current: one read on the pool's first connection says
        # so. Only a missing migration takes the locked migration transaction, on a
        # connection of its own (a connect is the costliest thing a fresh process does).
        await self._db.open()
        if await self._missing_migrations():
            await self.migrate()

    async def _missing_migrations(self) -> set[int]:
        wanted = {mig.version for mig in load_migrations("postgres")}
        async with self._db.connection() as conn:
            try:
                done = {row[0] for row in await conn.fetch(Q["migrations_done"])}
            except asyncpg.UndefinedTableError:  # a database tether never migrated
                done = set()
        return wanted - done

    async def open_existing(self) -> None:
        await self._db.open()
        if missing := await self._missing_migrations():
            await self.close()
            raise StoreNotReady(
                f"the tether store at {self._db.where} lacks migrations {sorted(missing)}; "
                "run `tether db migrate --db URL`"
            )

    async def close(self) -> None:
        await self._log.close()
        await self._leases.close()
        await self._db.close()

    async def migrate(self) -> list[str]:
        """Apply pending migrations in one transaction; works on an unopened store too.

        Concurrent callers (several replicas starting at once) queue on an advisory lock,
        so each migration is applied once and a caller returns only when the schema is
        current.
        """
        conn = await self._db.connect_one(bounded=False)
        try:
            with wrap_errors(self._db.where):
                async with conn.transaction():
                    await conn.execute(Q["migrations_lock"])
                    await conn.execute(Q["migrations_table"])
                    done = {row[0] for row in await conn.fetch(Q["migrations_done"])}
                    applied = []
                    for mig in load_migrations("postgres"):
                        if mig.version not in done:
                            await conn.execute(mig.sql)
                            await conn.execute(Q["migration_applied"], mig.version, mig.name)
                            applied.append(mig.name)
                    return applied
        finally:
            await conn.close()

    async def partition_log(self, partitions: int) -> bool:
        """Rebuild run_log with `partitions` hash partitions by run_id (1: plain); False if
        it already had that form. Works on an unopened store too."""
        return await partition_log(self._db, partitions)

    async def log_partitions(self) -> int:
        """How many hash partitions run_log has (0: a plain table)."""
        return await log_partitions(self._db)


async def migrate(url: str) -> list[str]:
    """Bring the database at `url` to the current schema; return the migrations applied."""
    return await PostgresStore(url, min_size=1, max_size=1).migrate()
