"""Export and import: a 500-, 5,000- and 50,000-node run written to a `.tlog` file from
SQLite and loaded into PostgreSQL (issue 13: a move from one store to another).

Export reads the run's rows once and frames them, hashing as it goes: for the largest run
(smaller ones are dominated by a few fixed queries, and inform) it must take no longer
than twice the run's rehydration (`Runtime.load`: the same read, decoded and
applied), measured in turns in the same run. Import reads and checks the whole file
(frames, hash, every record decoded and replayed) and creates the run in one transaction:
at most 1.5x its floor (the largest run), a rehydration of the run plus a bare
`create_runs` of the same rows. The file is the rows plus a few bytes a frame: at most
1.15x the rows' bytes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import replace

from bench.agents import chain
from bench.common import Line, Settings, open_pg, open_sqlite, p50
from bench.rehydrate import make_log
from tether.engine.runtime import Runtime
from tether.model.records import decode_one
from tether.ops.tlog import export_run, import_tlog, read_tlog
from tether.ops.tlog.format import END, HEADER, RUN, FrameWriter, read_frames
from tether.store import RunInfo, Status, Store
from tether.store.forks import NewRun

SIZES = (500, 5_000, 50_000)
QUICK_SIZES = (500, 5_000)
TARGET_EXPORT = 2.0  # export vs load of the same run
TARGET_IMPORT = 1.5  # import vs load + bare create_runs
TARGET_BYTES = 1.15  # file size vs the rows' bytes


async def _rename(data: bytes, old: str, new: str) -> bytes:
    """The file of the same run under another id (ids live in the header and run frames
    only; records do not name their run), framed again so its end hash holds."""

    async def whole() -> AsyncIterator[bytes]:
        yield data

    out = FrameWriter()
    parts = [out.start()]
    async for frame in read_frames("bench", whole()):
        if frame.kind == END:
            counts = {k: v for k, v in frame.json("bench").items() if k != "sha256"}
            parts.append(out.end(counts))
        elif frame.kind in (HEADER, RUN):
            parts.append(out.frame(frame.kind, frame.payload.replace(old.encode(), new.encode())))
        else:
            parts.append(out.frame(frame.kind, frame.payload))
    return b"".join(parts)


async def _timed(work: Awaitable[object]) -> float:
    """Seconds `work` (a coroutine not started yet) takes."""
    t0 = time.perf_counter()
    await work
    return time.perf_counter() - t0


async def _export(store: Store, run_id: str) -> bytes:
    return b"".join([c async for c in export_run(store, run_id)])


async def _import(store: Store, data: bytes) -> None:
    async def whole() -> AsyncIterator[bytes]:
        yield data

    await import_tlog(store, await read_tlog("bench", whole()))


async def _size(
    nodes: int, rows: list[bytes], lite: Store, pg: Store, reps: int, largest: bool
) -> list[Line]:
    run_id = f"tlog-{nodes}"
    version = decode_one(run_id, 0, rows[0]).run_started.agent_version or None
    info = RunInfo(run_id, chain.name, Status.SUCCEEDED, agent_version=version)
    await lite.runs.create(info, rows[0])
    await lite.log.append(run_id, list(enumerate(rows))[1:])
    source, target = Runtime(lite), Runtime(pg)
    data = await _export(lite, run_id)
    files = [await _rename(data, run_id, f"{run_id}-imp-{i}") for i in range(reps + 1)]
    exports, loads, imports, floors = [], [], [], []
    entries = list(enumerate(rows))[1:]
    for i in range(reps + 1):  # in turns; the first round warms up
        e = await _timed(_export(lite, run_id))
        lo = await _timed(source.load(run_id))
        im = await _timed(_import(pg, files[i]))
        bare = NewRun(RunInfo(f"{run_id}-bare-{i}", chain.name, Status.SUCCEEDED), rows[0])
        wr = await _timed(pg.forks.create_runs([replace(bare, entries=entries)]))
        ld = await _timed(target.load(f"{run_id}-imp-{i}"))
        if i:
            exports.append(e)
            loads.append(lo)
            imports.append(im)
            floors.append(wr + ld)
    assert await pg.log.read_all(f"{run_id}-imp-1") == rows
    ms = 1000.0
    row_bytes = sum(len(r) for r in rows)
    return [
        Line(
            "tlog",
            f"export a {nodes:,}-node run from SQLite, p50",
            p50(exports) * ms,
            "ms",
            "load (rehydrate) of the run, p50",
            p50(loads) * ms,
            target=f"<= {TARGET_EXPORT:g}x" if largest else "-",
            ok=p50(exports) <= TARGET_EXPORT * p50(loads) if largest else None,
            note=f"{len(rows):,} records; p50 of {reps}, in turns",
        ),
        Line(
            "tlog",
            "import it into PostgreSQL, p50",
            p50(imports) * ms,
            "ms",
            "load + bare create_runs of the rows, p50",
            p50(floors) * ms,
            target=f"<= {TARGET_IMPORT:g}x" if largest else "-",
            ok=p50(imports) <= TARGET_IMPORT * p50(floors) if largest else None,
            note="read, hash, decode, replay, one transaction",
        ),
        Line(
            "tlog",
            f"  .tlog file of the {nodes:,}-node run",
            float(len(data)),
            "B",
            "the rows' bytes",
            float(row_bytes),
            target=f"<= {TARGET_BYTES:g}x",
            ok=len(data) <= TARGET_BYTES * row_bytes,
            note="9 bytes a frame, a header, an end frame",
        ),
    ]


async def _measure(settings: Settings) -> list[Line]:
    sizes = QUICK_SIZES if settings.quick else SIZES
    reps = settings.size(3, 7)
    logs = {nodes: await make_log(nodes) for nodes in sizes}
    lines: list[Line] = []
    pg = await open_pg(settings)
    lite = await open_sqlite(settings, "tlog")
    try:
        for nodes in sizes:
            lines += await _size(nodes, logs[nodes], lite, pg, reps, nodes == max(sizes))
    finally:
        await lite.close()
        await pg.close()
    return lines


def run(settings: Settings) -> list[Line]:
    return asyncio.run(_measure(settings))
