"""What owning in-process runs under a lease costs (issue 10), measured in one run.

Run: `PYTHONPATH=src python bench/lease_cost.py [postgresql://postgres@127.0.0.1/postgres]`.
It creates a scratch database `tether_bench_lease` (tether's schema), drops it at the end,
and prints:

- heartbeat statements per second per run, for 1 run and for 16 runs held by one runtime
  (`Runtime.start`, default lease TTL), while every run waits in a node: counted by the
  runtime's heartbeat and, independently, as the commits PostgreSQL counted for the
  database (`pg_stat_database.xact_commit`, which nothing else touches meanwhile);
- single-record append p50/p99 with the epoch fence (`store.log.append(..., epoch=E)`), the
  same append unfenced, and a bare INSERT of the same 300-byte record (the floor),
  interleaved in rounds, while 16 in-process runs are held under heartbeats and 4
  background tasks append to other runs.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

import asyncpg

from tether import Context, Node, NodeResult, Registry, Runtime
from tether.engine.ownership import DEFAULT_LEASE_TTL
from tether.store import RunInfo, Status
from tether.store.postgres import PostgresStore

ADMIN_URL = sys.argv[1] if len(sys.argv) > 1 else "postgresql://postgres@127.0.0.1:5432/postgres"
DB = "tether_bench_lease"
URL = ADMIN_URL.rsplit("/", 1)[0] + "/" + DB
RECORD = bytes(range(256)) + bytes(44)
HOLD_S = 10.0
SETTLE_S = 11.0
APPENDS = 2000
ROUNDS = 5
BARE = "INSERT INTO run_log (run_id, seq, record) VALUES ($1, $2, $3)"
COMMITS = "SELECT xact_commit FROM pg_stat_database WHERE datname = $1"

held = Registry("bench.lease.held", entry="hold")
GATE = asyncio.Event()
# Runs that entered their node, and the event set once as many as wanted have.
ENTERED = {"count": 0, "want": 0}
ALL_IN = asyncio.Event()


@held.node("hold")
async def hold(ctx: Context, node: Node) -> NodeResult:
    ENTERED["count"] += 1
    if ENTERED["count"] >= ENTERED["want"]:
        ALL_IN.set()
    await GATE.wait()
    return NodeResult(None, is_result=True)


def pct(samples: list[float], p: int) -> float:
    return statistics.quantiles(samples, n=100)[p - 1] * 1000


async def commits(admin: asyncpg.Connection) -> int:
    # The statistics collector publishes with a delay; ask for a fresh snapshot first.
    await admin.execute("SELECT pg_stat_clear_snapshot()")
    value: int = await admin.fetchval(COMMITS, DB)
    return value


async def idle_commits(admin: asyncpg.Connection) -> float:
    """Commits/s PostgreSQL counts for the database with nothing of ours running."""
    await asyncio.sleep(SETTLE_S)
    c0, t0 = await commits(admin), time.monotonic()
    await asyncio.sleep(HOLD_S)
    return (await commits(admin) - c0) / (time.monotonic() - t0)


async def heartbeat_cost(
    store: PostgresStore, admin: asyncpg.Connection, runs: int, idle: float
) -> None:
    GATE.clear()
    ALL_IN.clear()
    ENTERED.update(count=0, want=runs)
    rt = Runtime(store, owner=f"bench-{runs}")
    tasks = [asyncio.create_task(rt.start(held, None)) for _ in range(runs)]
    await ALL_IN.wait()  # every run is recorded and waits in its node
    # An idle backend reports its counts within 10 s (PGSTAT_IDLE_INTERVAL): let the
    # commits of the runs' creation land before counting.
    await asyncio.sleep(SETTLE_S)
    beats0, commits0, t0 = rt.keeper.statements, await commits(admin), time.monotonic()
    await asyncio.sleep(HOLD_S)
    beats1, commits1, t1 = rt.keeper.statements, await commits(admin), time.monotonic()
    GATE.set()
    await asyncio.gather(*tasks)
    elapsed = t1 - t0
    counted = (beats1 - beats0) / elapsed / runs
    # Each snapshot query is itself a committed transaction of its own connection (admin
    # is on another database, so it is not counted here).
    seen = ((commits1 - commits0) / elapsed - idle) / runs
    print(
        f"{runs:>3} runs, lease {DEFAULT_LEASE_TTL:g}s: heartbeat {counted:.3f} statements/s/run "
        f"(counted by the heartbeat), {seen:.3f} commits/s/run (counted by PostgreSQL, "
        f"less its idle {idle:.2f}/s)"
    )


async def append_cost(store: PostgresStore) -> None:
    GATE.clear()
    ENTERED.update(count=0, want=16)
    rt = Runtime(store, owner="bench-load")
    held_runs = [asyncio.create_task(rt.start(held, None)) for _ in range(16)]
    await store.runs.create(RunInfo("fenced", "bench", Status.QUEUED), b"0")
    await store.runs.create(RunInfo("bare", "bench", Status.QUEUED), b"0")
    await store.runs.create(RunInfo("unfenced", "bench", Status.QUEUED), b"0")
    [claim] = await store.leases.claim("bench", 1, 600)
    db = store._db  # the same pool, so both kinds pay the same acquire
    seqs = {"fenced": 1, "bare": 1, "unfenced": 1}
    stop = asyncio.Event()

    async def background(i: int) -> None:
        run_id = f"load-{i}"
        await store.runs.create(RunInfo(run_id, "bench", Status.QUEUED), b"0")
        seq = 1
        while not stop.is_set():
            await store.log.append(run_id, [(seq, RECORD)])
            seq += 1

    async def fenced() -> None:
        await store.log.append(claim.run_id, [(seqs["fenced"], RECORD)], epoch=claim.epoch)
        seqs["fenced"] += 1

    async def unfenced() -> None:
        await store.log.append("unfenced", [(seqs["unfenced"], RECORD)])
        seqs["unfenced"] += 1

    async def bare() -> None:
        await db.execute(BARE, "bare", seqs["bare"], RECORD)
        seqs["bare"] += 1

    load = [asyncio.create_task(background(i)) for i in range(4)]
    kinds = (
        ("bare", bare, "bare INSERT"),
        ("unfenced", unfenced, "append (store)"),
        ("fenced", fenced, "fenced append (store)"),
    )
    samples: dict[str, list[float]] = {name: [] for name, _, _ in kinds}
    for _ in range(100):  # warm-up
        await fenced()
        await bare()
    for _ in range(ROUNDS):
        for name, fn, _ in kinds:
            for _ in range(APPENDS // ROUNDS):
                t0 = time.perf_counter()
                await fn()
                samples[name].append(time.perf_counter() - t0)
    stop.set()
    GATE.set()
    await asyncio.gather(*load, *held_runs)
    print(f"under load (16 held runs, 4 appenders), {APPENDS} appends each, ms:")
    print(f"{'':24} {'p50':>8} {'p99':>8}")
    for name, _, label in kinds:
        print(f"{label:24} {pct(samples[name], 50):8.3f} {pct(samples[name], 99):8.3f}")
    p50s = {name: pct(samples[name], 50) for name in samples}
    print(
        f"at p50: fenced / bare INSERT {p50s['fenced'] / p50s['bare']:.2f}x, "
        f"fenced / unfenced append {p50s['fenced'] / p50s['unfenced']:.2f}x"
    )


async def main() -> None:
    admin = await asyncpg.connect(ADMIN_URL)
    await admin.execute(f"DROP DATABASE IF EXISTS {DB}")
    await admin.execute(f"CREATE DATABASE {DB}")
    try:
        async with PostgresStore(URL, min_size=2, max_size=8) as store:
            print(f"PostgreSQL on {URL.split('@')[-1]}")
            idle = await idle_commits(admin)
            await heartbeat_cost(store, admin, 1, idle)
            await heartbeat_cost(store, admin, 16, idle)
            await append_cost(store)
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
