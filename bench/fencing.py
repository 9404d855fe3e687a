"""Fenced append vs a bare INSERT, through the store as a worker uses it, in one run.

Run: `PYTHONPATH=src python bench/fencing.py [postgresql://postgres@127.0.0.1/postgres]`.
It creates a scratch database `tether_bench_fencing` (migrated with tether's schema),
drops it at the end, and prints p50/p99 over APPENDS single-record appends of each kind,
interleaved in rounds so both see the same machine state:

- bare INSERT: `INSERT INTO run_log VALUES (...)` of the same 300-byte record (the floor)
- fenced append: `store.log.append(run_id, [(seq, record)], epoch=E)` (one statement:
  the epoch check is a FOR SHARE sub-select of the runs row, no extra round trip)
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

import asyncpg

from tether.store import RunInfo, Status
from tether.store.postgres import PostgresStore

ADMIN_URL = sys.argv[1] if len(sys.argv) > 1 else "postgresql://postgres@127.0.0.1:5432/postgres"
DB = "tether_bench_fencing"
URL = ADMIN_URL.rsplit("/", 1)[0] + "/" + DB
RECORD = bytes(range(256)) + bytes(44)
APPENDS = 3000
WARMUP = 200
ROUNDS = 6
BARE = "INSERT INTO run_log (run_id, seq, record) VALUES ($1, $2, $3)"


def pct(samples: list[float], p: float) -> float:
    return statistics.quantiles(samples, n=100)[int(p) - 1] * 1000


async def main() -> None:
    admin = await asyncpg.connect(ADMIN_URL)
    await admin.execute(f"DROP DATABASE IF EXISTS {DB}")
    await admin.execute(f"CREATE DATABASE {DB}")
    try:
        async with PostgresStore(URL, min_size=1, max_size=1) as store:
            await store.runs.create(RunInfo("fenced", "bench", Status.QUEUED), b"0")
            await store.runs.create(RunInfo("bare", "bench", Status.QUEUED), b"0")
            [claim] = await store.leases.claim("bench", 1, 600)
            db = store._db  # the same pool, so both kinds pay the same acquire
            seqs = {"fenced": 1, "bare": 1}
            samples: dict[str, list[float]] = {"fenced": [], "bare": []}

            async def fenced() -> None:
                seq = seqs["fenced"]
                await store.log.append(claim.run_id, [(seq, RECORD)], epoch=claim.epoch)
                seqs["fenced"] += 1

            async def bare() -> None:
                seq = seqs["bare"]
                await db.execute(BARE, "bare", seq, RECORD)
                seqs["bare"] += 1

            for _ in range(WARMUP):
                await fenced()
                await bare()
            per_round = APPENDS // ROUNDS
            for _ in range(ROUNDS):
                for name, fn in (("bare", bare), ("fenced", fenced)):
                    for _ in range(per_round):
                        t0 = time.perf_counter()
                        await fn()
                        samples[name].append(time.perf_counter() - t0)
        print(f"PostgreSQL on {URL.split('@')[-1]}: {APPENDS} appends of each kind, ms")
        print(f"{'':24} {'p50':>8} {'p99':>8}")
        for name, label in (("bare", "bare INSERT"), ("fenced", "fenced append (store)")):
            s = samples[name]
            print(f"{label:24} {pct(s, 50):8.3f} {pct(s, 99):8.3f}")
        ratio = pct(samples["fenced"], 50) / pct(samples["bare"], 50)
        print(f"fenced / bare at p50: {ratio:.2f}x")
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
