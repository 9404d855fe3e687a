"""Durable waits on PostgreSQL: what a parked run costs and how fast it wakes, in one run.

Run: `PYTHONPATH=src:. python -m bench.waits [postgresql://postgres@127.0.0.1/postgres]
[--events N] [--timers N] [--parked N]`. It creates a scratch database `tether_bench_waits`,
drops it at the end, starts one `tether worker` process on it (`--concurrency`, 64;
`--worker-pool`, 10 connections) and prints:

- **event delivery -> successor started** (p50/p99 ms): a run parked on `Wait("go")` (no
  process holds it); this process delivers the event (`Runtime.signal`: take the run at a
  new epoch, append, queue it, NOTIFY); the worker process claims it, replays its log and
  starts the successor, which reads the clock first thing. Against the floor, measured in
  the same run on the same server: a bare `INSERT` + `NOTIFY` in one statement, timed until
  a second connection's LISTEN callback fires.
- **timer lateness** (p50/p99 ms): N runs parked on `Sleep(until=T + i/N)`, due within the
  same second; lateness is when each successor started minus its deadline.
- **worker RSS with N runs waiting**: the worker process's resident set size after it has
  executed and parked a few runs, and again after N more; it must not grow with N (a
  parked run is a row, not a task or a graph in memory).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import asyncpg

from tether import Context, Node, NodeResult, Registry, Runtime, Sleep, Spawn, Status, Wait
from tether.store.postgres import PostgresStore

DB = "tether_bench_waits"
AGENT = "bench.waits:agent"
ROOT = Path(__file__).resolve().parent.parent

agent = Registry("bench.waits", entry="park")


@agent.node("park")
async def park(ctx: Context, node: Node) -> NodeResult:
    if node.input["mode"] == "event":
        return NodeResult(None, spawn=[Wait("go"), Spawn("then", after=["go"])])
    until = node.input["until"]
    return NodeResult(None, spawn=[Sleep("nap", until=until), Spawn("then", after=["nap"])])


@agent.node("then")
async def then(ctx: Context, node: Node) -> NodeResult:
    return NodeResult(time.time(), is_result=True)  # when the successor started


def pct(samples: list[float], p: int) -> float:
    return statistics.quantiles(samples, n=100)[p - 1] if len(samples) > 1 else samples[0]


def rss_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def insert_notify_floor(url: str, n: int) -> list[float]:
    """Seconds from sending INSERT + NOTIFY (one statement) to the LISTEN callback."""
    listener, sender = await asyncpg.connect(url), await asyncpg.connect(url)
    await sender.execute("CREATE TABLE IF NOT EXISTS bench_events (id bigint, payload bytea)")
    got: asyncio.Queue[float] = asyncio.Queue()
    await listener.add_listener("bench_waits", lambda *_: got.put_nowait(time.perf_counter()))
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        await sender.execute(
            "WITH e AS (INSERT INTO bench_events VALUES ($1, $2) RETURNING id) "
            "SELECT pg_notify('bench_waits', id::text) FROM e",
            i,
            b"x" * 100,
        )
        samples.append(await got.get() - t0)
    await listener.close()
    await sender.close()
    return samples


async def until_status(store: PostgresStore, run_ids: list[str], status: Status) -> None:
    pending = set(run_ids)
    while pending:
        rows = await store.runs.list(status=status, limit=len(run_ids) + 1000)
        pending -= {r.run_id for r in rows}
        if pending:
            await asyncio.sleep(0.05)


async def result_of(rt: Runtime, run_id: str) -> float:
    outcome = await rt.outcome(run_id)
    assert outcome.status is Status.SUCCEEDED, (run_id, outcome.status, outcome.reason)
    return float(outcome.result)


async def bench(
    url: str, events: int, timers: int, parked: int, pool: int, concurrency: int
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    async with PostgresStore(url, min_size=1, max_size=4) as store:
        rt = Runtime(store, owner="bench")
        worker = await asyncio.create_subprocess_exec(
            *[sys.executable, "-m", "tether", "--db", f"{url}?max_size={pool}", "worker"],
            *["--concurrency", str(concurrency)],
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            floor = await insert_notify_floor(url, events)
            # Event delivery: each run parked by the worker, then answered from here.
            ids = [await rt.submit(AGENT, {"mode": "event"}) for _ in range(events)]
            await until_status(store, ids, Status.WAITING)
            latency = []
            for run_id in ids:
                sent = time.time()
                await rt.signal(run_id, "go", None)
                await until_status(store, [run_id], Status.SUCCEEDED)
                latency.append(await result_of(rt, run_id) - sent)

            # Timers: parked runs due within one second, woken by the worker alone. The
            # deadlines leave time to park them all first (checked: lateness counts only
            # from a parked run's deadline).
            due = time.time() + 10 + timers * 0.04
            sleepers = []
            for i in range(timers):
                until = due + i / timers
                sleepers.append(await rt.submit(AGENT, {"mode": "sleep", "until": until}))
            await until_status(store, sleepers, Status.WAITING)
            parked_by = time.time()
            assert parked_by < due, f"parking {timers} runs took past their deadline"
            await until_status(store, sleepers, Status.SUCCEEDED)
            late = []
            for i, run_id in enumerate(sleepers):
                late.append(await result_of(rt, run_id) - (due + i / timers))
            assert min(late) >= 0, "a timer fired before its deadline"

            # Memory: the worker parks `parked` runs that never wake; RSS before and after.
            warm = [await rt.submit(AGENT, {"mode": "event"}) for _ in range(200)]
            await until_status(store, warm, Status.WAITING)
            rss_before = rss_of(worker.pid)
            many = [await rt.submit(AGENT, {"mode": "event"}) for _ in range(parked)]
            await until_status(store, many, Status.WAITING)
            await asyncio.sleep(1)
            rss_after = rss_of(worker.pid)
            waiting = len(await store.runs.list(status=Status.WAITING, limit=parked + 1000))
        finally:
            worker.terminate()
            await asyncio.wait_for(worker.wait(), 60)

    ms = 1000
    f50, f99 = pct(floor, 50) * ms, pct(floor, 99) * ms
    l50, l99 = pct(latency, 50) * ms, pct(latency, 99) * ms
    print(
        f"PostgreSQL {url.split('@')[-1]}: one `tether worker` process (concurrency {concurrency}, "
        f"{pool} pooled connections)"
    )
    print(f"{'':44} {'p50 ms':>9} {'p99 ms':>9}")
    print(f"{'floor: INSERT + NOTIFY -> LISTEN callback':44} {f50:9.2f} {f99:9.2f}")
    print(f"{'event delivery -> successor started':44} {l50:9.2f} {l99:9.2f}")
    print(f"  ratio to the floor: p50 {l50 / f50:.1f}x, p99 {l99 / f99:.1f}x ({events} events)")
    t50, t99 = pct(late, 50) * ms, pct(late, 99) * ms
    print(f"{f'timer lateness, {timers} runs due in one second':44} {t50:9.2f} {t99:9.2f}")
    print(f"  (all parked {due - parked_by:.1f}s before the first deadline)")
    mib = 1024 * 1024
    print(
        f"worker RSS: {rss_before / mib:.1f} MiB with 200 runs parked, "
        f"{rss_after / mib:.1f} MiB with {waiting} parked "
        f"({rss_after / rss_before:.3f}x for {waiting / 200:.0f}x the runs)"
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("admin_url", nargs="?", default="postgresql://postgres@127.0.0.1/postgres")
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--timers", type=int, default=1000)
    parser.add_argument("--parked", type=int, default=10_000)
    parser.add_argument("--worker-pool", type=int, default=10, help="the worker's connections")
    parser.add_argument("--concurrency", type=int, default=64, help="the worker's runs at once")
    args = parser.parse_args()
    url = args.admin_url.rsplit("/", 1)[0] + "/" + DB
    admin = await asyncpg.connect(args.admin_url)
    await admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    await admin.execute(f"CREATE DATABASE {DB}")
    try:
        await bench(url, args.events, args.timers, args.parked, args.worker_pool, args.concurrency)
    finally:
        await admin.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        await admin.close()


if __name__ == "__main__":
    asyncio.run(main())
