"""Operations: prune throughput, and what encryption, traces and metrics cost a run.

Prune: N finished runs of R log rows each are pruned in bounded batches (runs/s, rows/s);
the floor is one unbounded `DELETE` of as many rows of as many runs on the same backend
(what a prune without batches, family checks and live-run guards would cost).

Encryption, traces and metrics: the same chain runs (300-byte node outputs) are executed
with and without each, interleaved, best of the rounds; the floor is the run without. On
the memory store the process's CPU time is measured (the machine is shared), on SQLite
wall time (fsync dominates there).
Load is `Runtime.load` plus decoding every node's output, with and without encryption.

`python -m bench.operations [--quick]` prints the table; `python -m bench --only
operations` runs it with the others.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg

from bench.agents import chain
from bench.common import Line, Settings, drop_pg, prepare_pg
from bench.report import print_table
from tether.control.metering import metering
from tether.engine.runtime import Runtime
from tether.foundation import metrics, tracing
from tether.foundation.crypto import KeyRing
from tether.model.records import encode, run_paused
from tether.ops import prune
from tether.store import RunInfo, Status, Store, store_from_url

FAMILY = "operations"
ROW = encode(run_paused("x" * 200))  # a ~220-byte record


async def _fill(store: Store, runs: int, rows: int, prefix: str) -> None:
    """`runs` finished runs of `rows` log rows each (through the store's own API)."""
    for i in range(runs):
        run_id = f"{prefix}{i:06d}"
        await store.runs.create(RunInfo(run_id, "bench", Status.QUEUED), ROW)
        await store.log.append(run_id, [(seq, ROW) for seq in range(1, rows)])
        await store.runs.set_status(run_id, Status.SUCCEEDED)


async def _bulk_delete_s(store: Store, url: str, prefix: str) -> float:
    """One unbounded DELETE of the prefix's log rows and run rows: the floor."""
    t0 = time.perf_counter()
    if url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DELETE FROM run_log WHERE run_id >= ? AND run_id < ?", (prefix, prefix + "~"))
        conn.execute("DELETE FROM runs WHERE run_id >= ? AND run_id < ?", (prefix, prefix + "~"))
        conn.execute("COMMIT")
        conn.close()
    else:
        pg = await asyncpg.connect(url)
        try:
            async with pg.transaction():
                await pg.execute("DELETE FROM run_log WHERE run_id LIKE $1", prefix + "%")
                await pg.execute("DELETE FROM runs WHERE run_id LIKE $1", prefix + "%")
        finally:
            await pg.close()
    return time.perf_counter() - t0


async def prune_lines(backend: str, url: str, runs: int, rows: int) -> list[Line]:
    store = store_from_url(url)
    async with store:
        await _fill(store, runs, rows, "p")
        await _fill(store, runs, rows, "q")
        # Prune every finished run: the q runs are deleted by the floor first.
        floor_s = await _bulk_delete_s(store, url, "q")
        t0 = time.perf_counter()
        report = await prune(store, older_than=1e-6, now=time.time() + 1)
        took = time.perf_counter() - t0
    assert report.runs == runs and report.rows == runs * rows, report
    return [
        Line(FAMILY, f"prune {runs:,} runs x {rows} rows, {backend}", runs / took, "runs/s",
             "one unbounded DELETE of as many runs", runs / floor_s,
             note=f"{report.rows / took:,.0f} rows/s; pages of 500 runs, <= 5,000 rows a commit"),
    ]  # fmt: skip


def _clock(url: str) -> Callable[[], float]:
    """CPU time of this process on the memory store (the machine is shared: other
    processes' load would be measured too), wall time where a disk is involved."""
    return time.process_time if url == "memory:" else time.perf_counter


async def _chain_runs(rt: Runtime, runs: int, nodes: int) -> float:
    clock = _clock(rt.store.url)
    t0 = clock()
    for _ in range(runs):
        outcome = await rt.start(chain, nodes)
        assert outcome.status is Status.SUCCEEDED
    return clock() - t0


async def _interleaved(
    rounds: int, work: dict[str, Callable[[], Awaitable[float]]]
) -> dict[str, float]:
    """Best of `rounds` for each variant, the variants interleaved round by round."""
    best = {name: float("inf") for name in work}
    for _ in range(rounds):
        for name, fn in work.items():
            best[name] = min(best[name], await fn())
    return best


async def overhead_lines(backend: str, url: str, runs: int, nodes: int, rounds: int) -> list[Line]:
    keys = KeyRing.new()
    store = store_from_url(url)
    lines: list[Line] = []
    async with store:
        plain, sealed = Runtime(store), Runtime(store, keys=keys)
        run_ids: dict[str, str] = {}

        async def timed(rt: Runtime, name: str) -> float:
            took = await _chain_runs(rt, runs, nodes)
            run_ids[name] = (await store.runs.list(limit=1))[0].run_id
            return took

        best = await _interleaved(
            rounds,
            {"plain": lambda: timed(plain, "plain"), "sealed": lambda: timed(sealed, "sealed")},
        )
        per = runs * nodes
        lines.append(Line(
            FAMILY, f"encrypted run ({nodes}-node chain), {backend}", best["sealed"] / per * 1e6,
            "us/node", "the same run unencrypted", best["plain"] / per * 1e6,
            note="every Value sealed (AES-256-GCM); best of interleaved rounds"))  # fmt: skip

        async def load(rt: Runtime, run_id: str) -> float:
            clock = _clock(url)
            t0 = clock()
            for _ in range(20):
                graph = await rt.load(run_id)
                codec = rt.new_codec()
                for state in graph.nodes.values():
                    if state.completed is not None:
                        await codec.decode(state.completed.output)
            return (clock() - t0) / 20

        loads = await _interleaved(rounds, {
            "plain": lambda: load(plain, run_ids["plain"]),
            "sealed": lambda: load(sealed, run_ids["sealed"]),
        })  # fmt: skip
        lines.append(Line(
            FAMILY, f"  load + decode {nodes}-node run, encrypted, {backend}",
            loads["sealed"] * 1e3, "ms", "the same load unencrypted", loads["plain"] * 1e3,
            note="every output opened"))  # fmt: skip

        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter))
        traces = tracing.Tracing(provider)
        measured = metrics.Metrics()

        async def observed(kind: str) -> float:
            if kind == "traced":
                tracing.active = traces
            elif kind == "metered":
                metrics.active = measured
            try:
                async with metering(plain):
                    return await _chain_runs(plain, runs, nodes)
            finally:
                tracing.active, metrics.active = None, None
                exporter.clear()

        seen = await _interleaved(rounds, {
            "plain": lambda: observed("plain"),
            "traced": lambda: observed("traced"),
            "metered": lambda: observed("metered"),
        })  # fmt: skip
        for kind, what in (("traced", "traces (SDK batch processor)"),
                           ("metered", "Prometheus metrics")):  # fmt: skip
            lines.append(Line(
                FAMILY, f"  run with {what}, {backend}", seen[kind] / per * 1e6, "us/node",
                "the same run without", seen["plain"] / per * 1e6,
                note="a span (or samples) per node record"))  # fmt: skip
    return lines


def run(settings: Settings) -> list[Line]:
    runs = settings.size(300, 3000)
    rows = 10
    chains, nodes, rounds = settings.size(5, 20), 50, settings.size(3, 5)
    sqlite_url = f"sqlite:///{settings.workdir / 'ops.db'}"
    lines = asyncio.run(prune_lines("SQLite", sqlite_url, runs, rows))
    lines += asyncio.run(prune_lines("PostgreSQL", settings.pg_url, runs, rows))
    lines += asyncio.run(overhead_lines("memory", "memory:", chains * 4, nodes, rounds))
    lines += asyncio.run(
        overhead_lines("SQLite", f"sqlite:///{settings.workdir / 'enc.db'}", chains, nodes, rounds)
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.operations", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tether-ops-") as tmp:
        settings = Settings(quick=args.quick, workdir=Path(tmp))
        asyncio.run(prepare_pg(settings))
        try:
            lines = run(settings)
        finally:
            asyncio.run(drop_pg(settings))
    print_table(lines, title="tether operations")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
