"""Hash-partition the PostgreSQL run log by run_id (`tether db migrate --partitions N`).

Every statement tether sends to `run_log` filters on `run_id`, so with N hash partitions
each one touches one partition of about 1/N the rows and index; vacuum and retention work
partition by partition. The log is rebuilt in one transaction (the table is locked while
its rows are copied: plan it for a quiet moment on a large log); the schema is otherwise
unchanged, so every query and migration works on both forms.
"""

from __future__ import annotations

from tether.store.postgres.db import PgPool, wrap_errors
from tether.store.queries import load_queries

Q = load_queries("postgres", "partitions.sql")
MAX_PARTITIONS = 1024


async def log_partitions(db: PgPool) -> int:
    """The number of hash partitions of run_log now; 0 for a plain table."""
    conn = await db.connect_one()
    try:
        with wrap_errors(db.where):
            return int(await conn.fetchval(Q["log_partitions"]))
    finally:
        await conn.close()


async def partition_log(db: PgPool, partitions: int) -> bool:
    """Rebuild run_log with `partitions` hash partitions (1: one plain table).

    Returns False if it already had that form. ValueError for a count out of range.
    """
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise ValueError(f"--partitions {partitions}: choose 1 (plain) to {MAX_PARTITIONS}")
    conn = await db.connect_one(bounded=False)  # copying a large log takes its time
    try:
        with wrap_errors(db.where):
            async with conn.transaction():
                await conn.execute(Q["lock_log"])
                now = int(await conn.fetchval(Q["log_partitions"]))
                if now == partitions or (now == 0 and partitions == 1):
                    return False
                if partitions == 1:
                    await conn.execute(Q["create_plain"])
                else:
                    await conn.execute(Q["create_partitioned"])
                    for i in range(partitions):
                        # Names carry the modulus: a later repartition never collides.
                        await conn.execute(
                            f"CREATE TABLE run_log_h{partitions}_{i} PARTITION OF run_log_next "
                            f"FOR VALUES WITH (MODULUS {partitions}, REMAINDER {i})"
                        )
                await conn.execute(Q["copy_rows"])
                await conn.execute(Q["swap"])
                return True
    finally:
        await conn.close()
