"""Throughput on PostgreSQL: log records/s with 1, 10, 100 and 1,000 runs in one Runtime.

Each run is a linear chain of no-op nodes, created before the clock starts; the clock runs
while every run executes to its end. Records are the node records the runs appended in that
time, read back from the log once the clock has stopped (nothing wraps the store while it
runs); each run's finish record with its status UPDATE is inside the timing, not counted.
The floor is as many concurrent tasks each making the same number of bare single-row
INSERTs of the same bytes, through the store's own pool (default size 10), one after
another.

Batching: nodes that complete in the same wakeup are appended in one multi-row INSERT by
the executor; a fan-out of no-op siblings shows how much that lifts one run. Across runs
the PostgreSQL store groups appends made while others are in flight into one statement
(`store/postgres_group.py`); a bench-only flusher without fencing or judgement shows what
a bare group INSERT reaches against the same single-row floor, and the same writers making
the same appends through the store's log, without the executor, show what the store itself
reaches (where the cap is: the store and PostgreSQL, or the executor around them).
"""

from __future__ import annotations

import asyncio
import time

import asyncpg

from bench.agents import chain, fan
from bench.common import (
    Line,
    Settings,
    TimedLog,
    bare_insert,
    bare_insert_many,
    open_pg,
    p50,
    pg_pool,
    timed_log,
)
from tether.engine.runtime import Runtime
from tether.store.base import LogStore, Status

CONCURRENCY = (1, 10, 100, 1000)
# Issue 12: with 100 and with 1,000 concurrent runs in one process, on PostgreSQL.
TARGET_RECORDS_S = 50_000
TARGET_RUNS = (100, 1000)
FAN_WIDTH = 64


async def _floor(pool: asyncpg.Pool, tag: str, per_task: list[list[bytes]]) -> float:
    """Wall seconds for len(per_task) tasks each inserting its records one by one."""

    async def task(i: int, records: list[bytes]) -> None:
        for seq, record in enumerate(records):
            await bare_insert(pool, f"{tag}-{i}", seq, record)

    t0 = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        for i, records in enumerate(per_task):
            tg.create_task(task(i, records))
    return time.perf_counter() - t0


async def _group_commit(pool: asyncpg.Pool, tag: str, per_task: list[list[bytes]]) -> float:
    """Wall seconds for the same writers when one flusher turns all waiting rows into one INSERT."""
    waiting: list[tuple[str, int, bytes, asyncio.Future[None]]] = []
    wake = asyncio.Event()
    done = asyncio.Event()

    async def flusher() -> None:
        while not done.is_set():
            await wake.wait()
            wake.clear()
            batch = waiting[:]
            del waiting[:]
            if not batch:
                continue
            async with pool.acquire() as conn:
                await conn.execute(
                    "INSERT INTO run_log (run_id, seq, record) SELECT * FROM "
                    "unnest($1::text[], $2::bigint[], $3::bytea[])",
                    [b[0] for b in batch],
                    [b[1] for b in batch],
                    [b[2] for b in batch],
                )
            for *_, fut in batch:
                fut.set_result(None)

    loop = asyncio.get_running_loop()

    async def task(i: int, records: list[bytes]) -> None:
        for seq, record in enumerate(records):
            fut: asyncio.Future[None] = loop.create_future()
            waiting.append((f"{tag}-{i}", seq, record, fut))
            wake.set()
            await fut

    t0 = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        # Several flushers in flight, as a store with a pool would run them.
        flushers = [tg.create_task(flusher()) for _ in range(4)]
        async with asyncio.TaskGroup() as writers:
            for i, records in enumerate(per_task):
                writers.create_task(task(i, records))
        done.set()
        wake.set()
        for f in flushers:
            f.cancel()
    return time.perf_counter() - t0


async def _store_appends(log: LogStore, tag: str, per_task: list[list[bytes]]) -> float:
    """Wall seconds for the same writers appending their records one by one through the log."""

    async def task(i: int, records: list[bytes]) -> None:
        for seq, record in enumerate(records):
            await log.append(f"{tag}-{i}", [(seq, record)])

    t0 = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        for i, records in enumerate(per_task):
            tg.create_task(task(i, records))
    return time.perf_counter() - t0


async def _measure(settings: Settings) -> list[Line]:
    rows_target = settings.size(1000, 4000)
    store = await open_pg(settings)
    lines: list[Line] = []
    try:
        pool = pg_pool(store)
        rt = Runtime(store)
        await rt.start(chain, 20)  # warm the pool and statements
        for runs in CONCURRENCY:
            nodes = max(settings.size(5, 10), rows_target // runs)
            graphs = await asyncio.gather(
                *(rt.create(chain, nodes, status=Status.RUNNING) for _ in range(runs))
            )
            t0, cpu0 = time.perf_counter(), time.process_time()
            await asyncio.gather(*(rt.execute(g) for g in graphs))
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
            # Each run's rows but its RunStarted (made before the clock) and its finish.
            logs = await asyncio.gather(*(store.log.read_all(g.run_id) for g in graphs))
            per_task = [rows[1:-1] for rows in logs]
            assert all(len(rows) == nodes for rows in per_task), "a run did not complete"
            records = sum(map(len, per_task))
            floor_wall = await _floor(pool, f"floor{runs}", per_task)
            lines.append(
                Line(
                    "throughput",
                    f"{runs:,} concurrent runs x {nodes} nodes, records/s",
                    records / wall,
                    "rec/s",
                    f"{runs:,} tasks x bare 1-row INSERTs",
                    records / floor_wall,
                    target=f">= {TARGET_RECORDS_S:,} rec/s" if runs in TARGET_RUNS else "-",
                    ok=records / wall >= TARGET_RECORDS_S if runs in TARGET_RUNS else None,
                    note="higher is better; includes each run's finish record and status "
                    f"UPDATE; this process's CPU: {cpu / records * 1e6:.0f} us a record, "
                    f"{cpu / wall:.0%} of the wall time",
                    extra={"cpu_us_per_record": cpu / records * 1e6, "cpu_share": cpu / wall},
                )
            )
            if runs in TARGET_RUNS:
                cpu0 = time.process_time()
                store_wall = await _store_appends(store.log, f"store{runs}", per_task)
                cpu = time.process_time() - cpu0
                lines.append(
                    Line(
                        "throughput",
                        f"store only: {runs:,} writers append through the log, rows/s",
                        records / store_wall,
                        "rec/s",
                        f"{runs:,} tasks x bare 1-row INSERTs",
                        records / floor_wall,
                        note="the same appends without the executor (group commit, no "
                        f"fencing); this process's CPU: {cpu / records * 1e6:.0f} us a record",
                        extra={"cpu_us_per_record": cpu / records * 1e6},
                    )
                )
            if runs == CONCURRENCY[-1]:
                gc_wall = await _group_commit(pool, f"gc{runs}", per_task)
                lines.append(
                    Line(
                        "throughput",
                        f"bench-only group commit, {runs:,} writers, rows/s",
                        records / gc_wall,
                        "rec/s",
                        f"{runs:,} tasks x bare 1-row INSERTs",
                        records / floor_wall,
                        note="what a store-level cross-run group commit could reach",
                    )
                )
        lines += await _batching(settings, rt, timed_log(store), pool)
    finally:
        await store.close()
    return lines


async def _batching(
    settings: Settings, rt: Runtime, log: TimedLog, pool: asyncpg.Pool
) -> list[Line]:
    """One run whose FAN_WIDTH no-op siblings complete together: one append per flush."""
    reps = settings.size(10, 30)
    batched: list[float] = []
    single: list[float] = []
    floors: list[float] = []
    sizes: list[int] = []
    for r in range(reps):
        log.appends.clear()
        await rt.start(fan, {"width": FAN_WIDTH, "sleep_s": 0})
        nodes = log.node_appends()
        big = max(nodes, key=lambda a: a.rows)
        sizes.append(big.rows)
        batched.append(big.rows / big.seconds)
        single += [a.rows / a.seconds for a in nodes if a.rows == 1]
        floors.append(big.rows / await bare_insert_many(pool, f"many-{r}", 0, big.records))
    lines = [
        Line(
            "throughput",
            f"one run, {FAN_WIDTH} siblings complete together: append rows/s",
            p50(batched),
            "rec/s",
            f"bare {FAN_WIDTH}-row INSERT (unnest), same bytes",
            p50(floors),
            note=f"largest flush per run, p50 of {reps}; flush sizes {min(sizes)}..{max(sizes)}",
        ),
    ]
    if single:
        lines.append(
            Line(
                "throughput",
                f"batching lift: {FAN_WIDTH}-record append vs 1-record append, rows/s",
                p50(batched),
                "rec/s",
                "1-record appends (root nodes) of the same runs",
                p50(single),
                note="ratio = how much one flush of siblings lifts a run's append rate",
            )
        )
    return lines


def run(settings: Settings) -> list[Line]:
    return asyncio.run(_measure(settings))
