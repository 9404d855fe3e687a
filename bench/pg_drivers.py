"""Measure psycopg 3 against asyncpg on tether's log statements, on this machine, in one run.

Run: `PYTHONPATH=src python bench/pg_drivers.py [postgresql://postgres@127.0.0.1/postgres]`.
It creates a scratch database `tether_bench_drivers`, drops it at the end, and prints:

- append: the store's `append` query as shipped, one 300-byte record through a pool
- bare insert: a plain single-row INSERT of the same bytes (the floor for a durable write)
- fenced append: the append with the `FOR SHARE` epoch check of the runs row in the statement
- replay 5,000: fetch 5,000 records of one run in seq order into a list of bytes
- append 64: one 64-row append (the group-commit shape when nodes finish together)

Both pools are tuned the way the store would use them: asyncpg with its per-release
`RESET ALL` round trip turned off (`reset=` a no-op), psycopg in autocommit with statements
prepared on first use (`prepare_threshold=0`) and bytea sent in binary.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import psycopg
from psycopg_pool import AsyncConnectionPool

from tether.store.queries import load_queries

Q = load_queries("postgres")

ADMIN_URL = sys.argv[1] if len(sys.argv) > 1 else "postgresql://postgres@127.0.0.1:5432/postgres"
DB = "tether_bench_drivers"
URL = ADMIN_URL.rsplit("/", 1)[0] + "/" + DB
RECORD = bytes(range(256)) + bytes(44)  # 300 bytes, not all-zero (no TOAST compression win)
APPENDS = 2000
WARMUP = 200
REPLAY_ROWS = 5000
REPLAY_ROUNDS = 30
BATCH = 64
BATCH_ROUNDS = 300

SCHEMA = """
CREATE TABLE run_log (run_id text NOT NULL, seq bigint NOT NULL, record bytea NOT NULL,
                      PRIMARY KEY (run_id, seq));
CREATE TABLE runs (run_id text PRIMARY KEY, epoch bigint NOT NULL DEFAULT 0);
"""

# The store's own statements (asyncpg's $n placeholders; psycopg gets them renamed).
APPEND = Q["append"]
APPEND_FENCED = Q["append_fenced"]
BARE = "INSERT INTO run_log (run_id, seq, record) VALUES ($1, $2, $3)"
REPLAY = "SELECT record FROM run_log WHERE run_id = $1 ORDER BY seq"


def to_psycopg(sql: str) -> str:
    """Turn $n placeholders into psycopg's %(pn)s named ones (a $n may repeat)."""
    for n in range(9, 0, -1):
        sql = sql.replace(f"${n}", f"%(p{n})s")
    return sql


def named(*args: Any) -> dict[str, Any]:
    return {f"p{i}": a for i, a in enumerate(args, 1)}


class Driver:
    name: str

    async def execute(self, sql: str, *args: Any) -> None:
        raise NotImplementedError

    async def fetch_bytes(self, sql: str, *args: Any) -> list[bytes]:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class Psycopg(Driver):
    name = "psycopg 3"

    async def open(self) -> None:
        self.pool = AsyncConnectionPool(
            URL,
            min_size=4,
            max_size=4,
            open=False,
            kwargs={"autocommit": True, "prepare_threshold": 0},
        )
        await self.pool.open(wait=True)

    async def execute(self, sql: str, *args: Any) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(to_psycopg(sql), named(*args), binary=True)

    async def fetch_bytes(self, sql: str, *args: Any) -> list[bytes]:
        async with self.pool.connection() as conn:
            cur = await conn.execute(to_psycopg(sql), named(*args), binary=True)
            return [r[0] for r in await cur.fetchall()]

    async def close(self) -> None:
        await self.pool.close()


async def _no_reset(conn: asyncpg.Connection) -> None:
    """Skip asyncpg's `RESET ALL` on release: the store sets no session state to undo."""


class Asyncpg(Driver):
    name = "asyncpg"

    async def open(self) -> None:
        self.pool = await asyncpg.create_pool(URL, min_size=4, max_size=4, reset=_no_reset)

    async def execute(self, sql: str, *args: Any) -> None:
        async with self.pool.acquire() as conn:
            await conn.execute(sql, *args)

    async def fetch_bytes(self, sql: str, *args: Any) -> list[bytes]:
        async with self.pool.acquire() as conn:
            return [r[0] for r in await conn.fetch(sql, *args)]

    async def close(self) -> None:
        await self.pool.close()


async def timed(n: int, op: Callable[[int], Awaitable[object]]) -> list[float]:
    """Run op(i) n times one after another; return each latency in ms."""
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        await op(i)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(d: Driver, tag: str) -> dict[str, tuple[float, float]]:
    """Return {metric: (p50 ms, p99 ms)} for one driver; run ids are unique per driver+tag."""
    run = f"{tag}-{d.name}"
    await d.execute("INSERT INTO runs (run_id, epoch) VALUES ($1, 7)", run)
    res: dict[str, tuple[float, float]] = {}

    async def append(i: int) -> None:
        await d.execute(APPEND, run, [i], [RECORD])

    async def fenced(i: int) -> None:
        await d.execute(APPEND_FENCED, run, [100_000 + i], [RECORD], 7)

    async def bare(i: int) -> None:
        await d.execute(BARE, run + "-bare", i, RECORD)

    for metric, op, base in (("append 1", append, 0), ("bare insert", bare, 0)):
        await timed(WARMUP, lambda i, op=op, base=base: op(base + 10_000_000 + i))
        s = await timed(APPENDS, op)
        res[metric] = (statistics.median(s), pct(s, 0.99))
    await timed(WARMUP, lambda i: fenced(10_000_000 + i))
    s = await timed(APPENDS, fenced)
    res["fenced append 1"] = (statistics.median(s), pct(s, 0.99))

    seqs = list(range(REPLAY_ROWS))
    await d.execute(APPEND, run + "-replay", seqs, [RECORD] * REPLAY_ROWS)
    got = await d.fetch_bytes(REPLAY, run + "-replay")
    assert len(got) == REPLAY_ROWS and got[0] == RECORD, "replay returned the wrong rows"
    s = await timed(REPLAY_ROUNDS, lambda i: d.fetch_bytes(REPLAY, run + "-replay"))
    res["replay 5,000"] = (statistics.median(s), pct(s, 0.99))

    def batch(i: int) -> Awaitable[None]:
        start = 20_000_000 + i * BATCH
        return d.execute(APPEND, run, list(range(start, start + BATCH)), [RECORD] * BATCH)

    s = await timed(BATCH_ROUNDS, batch)
    res["append 64"] = (statistics.median(s), pct(s, 0.99))
    return res


async def main() -> None:
    admin = await psycopg.AsyncConnection.connect(ADMIN_URL, autocommit=True)
    await admin.execute(f"DROP DATABASE IF EXISTS {DB}")
    await admin.execute(f"CREATE DATABASE {DB}")
    try:
        async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as conn:
            await conn.execute(SCHEMA)
        drivers: list[Driver] = [Psycopg(), Asyncpg()]
        for d in drivers:
            await d.open()  # type: ignore[attr-defined]
        # Two interleaved rounds so that neither driver always gets the warmer disk cache.
        results: dict[str, list[dict[str, tuple[float, float]]]] = {d.name: [] for d in drivers}
        for rnd in range(2):
            for d in drivers if rnd == 0 else reversed(drivers):
                results[d.name].append(await measure(d, f"r{rnd}"))
        for d in drivers:
            await d.close()
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        await admin.close()

    metrics = list(results[drivers[0].name][0])
    print(f"{'ms (best of 2 rounds)':<22}" + "".join(f"{d.name:>22}" for d in drivers) + "   ratio")
    for m in metrics:
        cells, p50s = [], []
        for d in drivers:
            p50, p99 = min((r[m] for r in results[d.name]), key=lambda t: t[0])
            cells.append(f"{p50:8.3f} p50 {p99:6.3f} p99")
            p50s.append(p50)
        print(f"{m:<22}" + "".join(f"{c:>22}" for c in cells) + f"   {p50s[0] / p50s[1]:5.2f}x")
    print("ratio = psycopg p50 / asyncpg p50 (above 1: asyncpg is faster)")


if __name__ == "__main__":
    asyncio.run(main())
