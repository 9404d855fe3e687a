"""Rehydration and recovery: `Runtime.load` of a 5,000- (and 50,000-) node run on PostgreSQL
and SQLite, and `Runtime.resume` of a crashed one up to its first pending node running.

The log is what the executor writes for a chain of no-op nodes (generated once on the
in-memory store, then appended to each backend in one call). `Runtime.load` reads the rows,
decodes them in one parse and applies every record to a fresh Graph. Targets (issue 12):
p50 <= 8 ms for 5,000 nodes and <= 80 ms for 50,000, and <= 3x the floor: fetching the
same rows with the same driver in the same run (`read_all`), timed in turns with the loads
(`bench.common.interleaved`). Recovery: a run that crashed
before its last node, resumed in a runtime that never saw it, until that node's handler
starts: <= 1.5x the load, in a runtime that never saw it and in a fresh process running
what `tether resume` runs (`bench/resume_child.py`; it also checks the log is read once).
Informational lines split load into its parts (decode alone,
decode + apply) so a miss shows where the time goes; a cProfile of the PostgreSQL load is
written next to the results.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from asyncio import Future
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.agents import chain
from bench.common import Line, Settings, interleaved, open_pg, open_sqlite, p50
from tether.engine.runtime import Runtime
from tether.model.columns import applied
from tether.model.graph import Graph
from tether.model.records import decode_log
from tether.store import RunInfo, Status, Store, store_from_url

TARGET_MS_PER_5000 = 8.0  # and 80 ms for 50,000: linear
TARGET_FETCH_RATIO = 3.0
TARGET_RECOVERY_RATIO = 1.5
TARGET_NODES = 5000
FRESH_RESUMES = 3  # fresh processes at least (a third of the reps when there are more)
PROFILE_PATH = Path(__file__).parent / "results" / "rehydrate-profile.txt"


async def make_log(nodes: int) -> list[bytes]:
    """The rows the executor writes for a chain of `nodes` no-op nodes."""
    store = store_from_url("memory:")
    async with store:
        outcome = await Runtime(store).start(chain, nodes)
        return await store.log.read_all(outcome.run_id)


async def _times(reps: int, fn: Callable[[], Awaitable[object]]) -> list[float]:
    await fn()  # warm-up: statement caches, page cache
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - t0)
    return out


def _apply_all(run_id: str, rows: list[bytes]) -> Graph:
    """What `Runtime.load` does with the rows it fetched: decode and apply (`applied`)."""
    return applied(Graph(run_id), rows)


async def _decode(run_id: str, rows: list[bytes]) -> None:
    decode_log(run_id, rows)


async def _one_backend(
    backend: str, store: Store, url: str, run_id: str, rows: list[bytes], reps: int
) -> tuple[list[Line], float]:
    nodes = len(rows) - 2
    await store.log.append(run_id, list(enumerate(rows)))
    rt = Runtime(store)
    graph = await rt.load(run_id)
    assert graph.completed_count == nodes and graph.status == "succeeded"
    # In turns: a burst on the machine hits a load and its floor alike.
    turns = await interleaved(
        reps, {"load": lambda: rt.load(run_id), "fetch": lambda: store.log.read_all(run_id)}
    )
    load, fetch = turns["load"], turns["fetch"]
    ms = 1000.0
    target_ms = TARGET_MS_PER_5000 * max(1, nodes // TARGET_NODES)
    nbytes = sum(map(len, rows))
    ok = p50(load) * ms <= target_ms and p50(load) <= TARGET_FETCH_RATIO * p50(fetch)
    lines = [
        Line(
            "rehydrate",
            f"load {nodes:,}-node run, {backend}, p50",
            p50(load) * ms,
            "ms",
            f"fetch the same rows ({backend}, read_all), p50",
            p50(fetch) * ms,
            target=f"<= {target_ms:g} ms, <= {TARGET_FETCH_RATIO:g}x",
            ok=ok,
            note=f"{len(rows):,} rows, {nbytes / 1024:,.0f} KiB; p50 of {reps}",
        ),
    ]
    if nodes <= TARGET_NODES:
        lines.append(await _recovery(backend, store, run_id, rows, reps, p50(load)))
        lines.append(await _fresh_recovery(backend, store, url, run_id, rows, reps, p50(load)))
    return lines, p50(load)


async def _crashed_copy(store: Store, rid: str, rows: list[bytes]) -> None:
    """A copy of the run that crashed before its last node: no record of that node, no
    finish, no pause (a crash); its row free to take, as once the dead owner's lease ran out."""
    crashed = rows[:-2]
    await store.runs.create(RunInfo(rid, chain.name, Status.PAUSED), crashed[0])
    await store.log.append(rid, list(enumerate(crashed))[1:])


async def _fresh_recovery(
    backend: str, store: Store, url: str, run_id: str, rows: list[bytes], reps: int, load_s: float
) -> Line:
    """`tether resume` of a crashed copy in a fresh process, to its next node's start."""
    samples: list[float] = []
    reads: set[int] = set()
    with tempfile.TemporaryDirectory(prefix="tether-resume-") as tmp:
        for i in range(max(FRESH_RESUMES, reps // 3)):
            rid = f"{run_id}-fresh-{i}"
            await _crashed_copy(store, rid, rows)
            out = Path(tmp) / f"{i}.json"
            child = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bench.resume_child",
                url,
                rid,
                str(out),
                stdout=asyncio.subprocess.DEVNULL,
            )
            assert await child.wait() == 0, f"resume child exited {child.returncode}"
            got = json.loads(out.read_text())
            samples.append(got["seconds"])
            reads.add(got["reads"])
    ms = 1000.0
    return Line(
        "rehydrate",
        f"  recovery in a fresh process (tether resume), {len(rows) - 2:,}-node run, {backend}",
        p50(samples) * ms,
        "ms",
        "load of the same run, p50",
        load_s * ms,
        target=f"<= {TARGET_RECOVERY_RATIO:g}x, log read once",
        ok=p50(samples) <= TARGET_RECOVERY_RATIO * load_s and reads == {1},
        note=f"from the command's start (store open) to the node; log reads {sorted(reads)}; "
        f"p50 of {len(samples)}",
    )


async def _recovery(
    backend: str, store: Store, run_id: str, rows: list[bytes], reps: int, load_s: float
) -> Line:
    """Resume of the same run crashed before its last node, to that node's handler start."""
    samples: list[float] = []
    for i in range(reps + 1):  # the first warms up
        rid = f"{run_id}-crashed-{i}"
        await _crashed_copy(store, rid, rows)
        rt = Runtime(store)  # a fresh runtime: nothing resident
        started = asyncio.get_running_loop().create_future()

        def seen(_: str, __: str, event: dict[str, object], started: Future[float] = started):
            if event.get("type") == "node_started" and not started.done():
                started.set_result(time.perf_counter())

        rt.events.on_event(seen)
        t0 = time.perf_counter()
        outcome = await rt.resume(rid)
        assert outcome.status == "succeeded", outcome.reason
        if i:
            samples.append(started.result() - t0)
    ms = 1000.0
    return Line(
        "rehydrate",
        f"  recovery: resume crashed {len(rows) - 2:,}-node run to its next node, {backend}",
        p50(samples) * ms,
        "ms",
        "load of the same run, p50",
        load_s * ms,
        target=f"<= {TARGET_RECOVERY_RATIO:g}x",
        ok=p50(samples) <= TARGET_RECOVERY_RATIO * load_s,
        note=f"fresh Runtime, load + RunResumed + status + launch; p50 of {reps}",
    )


async def _measure(settings: Settings) -> list[Line]:
    sizes = [TARGET_NODES] if settings.quick else [TARGET_NODES, 50_000]
    reps = settings.size(7, 15)
    lines: list[Line] = []
    pg = await open_pg(settings)
    try:
        for nodes in sizes:
            rows = await make_log(nodes)
            run_id = f"rehydrate-{nodes}"
            r = reps if nodes <= TARGET_NODES else max(3, reps // 3)
            pg_lines, _ = await _one_backend("PostgreSQL", pg, settings.pg_url, run_id, rows, r)
            lite = await open_sqlite(settings, f"rehydrate-{nodes}")
            lite_url = f"sqlite:///{settings.workdir / f'rehydrate-{nodes}.db'}"
            try:
                lite_lines, _ = await _one_backend("SQLite", lite, lite_url, run_id, rows, r)
            finally:
                await lite.close()
            decode = await _times(r, lambda rows=rows, run_id=run_id: _decode(run_id, rows))
            apply = await _times(r, lambda rows=rows, run_id=run_id: _apply_async(run_id, rows))
            ms = 1000.0
            lines += pg_lines + lite_lines
            lines.append(
                Line(
                    "rehydrate",
                    f"  decode + apply {nodes:,} records (no fetch), p50",
                    p50(apply) * ms,
                    "ms",
                    "decode_log alone",
                    p50(decode) * ms,
                    note="what Runtime.load runs after the fetch (columns.applied: node "
                    "records read as columns, gc off); ratio - 1 is the apply share",
                )
            )
            if nodes == TARGET_NODES:
                await _profile(Runtime(pg), run_id)
    finally:
        await pg.close()
    return lines


async def _apply_async(run_id: str, rows: list[bytes]) -> None:
    _apply_all(run_id, rows)


async def _profile(rt: Runtime, run_id: str) -> None:
    """cProfile of a few loads on PostgreSQL, top functions by own time, to a text file."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5):
        await rt.load(run_id)
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(15)
    PROFILE_PATH.parent.mkdir(parents=True, exist_ok=True)
    PROFILE_PATH.write_text(out.getvalue())


def run(settings: Settings) -> list[Line]:
    return asyncio.run(_measure(settings))
