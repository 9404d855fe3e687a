"""Forks: creating a fork of a 500-, 5,000- and 50,000-node run, and rehydrating it.

A fork references its source's records instead of copying them (`tether.store.forks`), so
forking costs a few rows whatever the prefix (issue 13): the fork of the largest run must
take no longer than the fork of the smallest (<= 1.5x, noise) and write no more rows
(<= 3: seq 0 and at most an override and a RunResumed; these forks write only seq 0).
Rehydrating a fork (`Runtime.load`: its own rows and the referenced ones in one statement)
costs about what rehydrating its source does (<= 1.25x). The source's log is what the
executor writes for a chain of no-op nodes; each fork is taken at its last seq before the
run's end, so the prefix is the whole run. PostgreSQL and SQLite.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from bench.agents import chain
from bench.common import Line, Settings, interleaved, open_pg, open_sqlite, p50
from bench.rehydrate import make_log
from tether.engine.runtime import Runtime
from tether.model.records import decode_one
from tether.store import RunInfo, Status, Store

SIZES = (500, 5_000, 50_000)
QUICK_SIZES = (500, 5_000)
TARGET_GROWTH = 1.5  # fork of the largest run vs fork of the smallest
TARGET_ROWS = 3
TARGET_LOAD_RATIO = 1.25  # load of a fork vs load of its source


async def _source(store: Store, nodes: int, rows: list[bytes]) -> str:
    run_id = f"fork-source-{nodes}"
    # Its row names the version it runs on, as Runtime.create writes it (a fork reads the
    # log only when the row says the run moved to another version).
    version = decode_one(run_id, 0, rows[0]).run_started.agent_version or None
    info = RunInfo(run_id, chain.name, Status.SUCCEEDED, agent_version=version)
    await store.runs.create(info, rows[0])
    await store.log.append(run_id, list(enumerate(rows))[1:])
    return run_id


async def _backend(
    backend: str, store: Store, logs: dict[int, list[bytes]], reps: int
) -> list[Line]:
    rt = Runtime(store)
    ms = 1000.0
    sources = {nodes: await _source(store, nodes, rows) for nodes, rows in logs.items()}
    made: dict[int, list[str]] = {nodes: [] for nodes in logs}

    def forker(nodes: int) -> Callable[[], Awaitable[object]]:
        async def one() -> None:
            # The last seq before run_finished: the whole run is the prefix.
            made[nodes].append(await rt.fork(sources[nodes], at_seq=len(logs[nodes]) - 2))

        return one

    forks = await interleaved(reps, {str(n): forker(n) for n in logs})
    small, large = min(logs), max(logs)
    lines = [
        Line(
            "fork",
            f"fork a {nodes:,}-node run at its end, {backend}, p50",
            p50(forks[str(nodes)]) * ms,
            "ms",
            f"fork of the {small:,}-node run, p50",
            p50(forks[str(small)]) * ms,
            target=f"<= {TARGET_GROWTH:g}x" if nodes == large else "-",
            ok=p50(forks[str(nodes)]) <= TARGET_GROWTH * p50(forks[str(small)])
            if nodes == large
            else None,
            note=f"p50 of {reps}, in turns; reads 2 records of the source, writes the fork",
        )
        for nodes in sorted(logs, reverse=True)
    ]
    for nodes, rows in logs.items():
        fork_id = made[nodes][-1]
        written = (await store.retention.log_size([fork_id])).rows
        assert (await rt.load(fork_id)).next_seq == len(rows) - 1
        r = max(3, reps // 3) if nodes > 5_000 else reps
        loads = await interleaved(
            r, {"fork": lambda f=fork_id: rt.load(f), "source": lambda s=sources[nodes]: rt.load(s)}
        )
        lines.append(
            Line(
                "fork",
                f"  fork of a {nodes:,}-node run, {backend}: rows written",
                float(written),
                "rows",
                "records in the prefix",
                float(len(rows) - 1),
                target=f"<= {TARGET_ROWS}",
                ok=written <= TARGET_ROWS,
                note="the fork's own rows; the prefix is referenced",
            )
        )
        lines.append(
            Line(
                "fork",
                f"load a fork of a {nodes:,}-node run, {backend}, p50",
                p50(loads["fork"]) * ms,
                "ms",
                "load of its source, p50",
                p50(loads["source"]) * ms,
                target=f"<= {TARGET_LOAD_RATIO:g}x",
                ok=p50(loads["fork"]) <= TARGET_LOAD_RATIO * p50(loads["source"]),
                note=f"{len(rows) - 1:,} records; p50 of {r}, in turns",
            )
        )
    return lines


async def _measure(settings: Settings) -> list[Line]:
    sizes = QUICK_SIZES if settings.quick else SIZES
    reps = settings.size(9, 21)
    logs = {nodes: await make_log(nodes) for nodes in sizes}
    lines: list[Line] = []
    pg = await open_pg(settings)
    try:
        lines += await _backend("PostgreSQL", pg, logs, reps)
    finally:
        await pg.close()
    lite = await open_sqlite(settings, "fork")
    try:
        lines += await _backend("SQLite", lite, logs, reps)
    finally:
        await lite.close()
    return lines


def run(settings: Settings) -> list[Line]:
    return asyncio.run(_measure(settings))
