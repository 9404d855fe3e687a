"""Checkpoint cost: the executor's append of one node record on PostgreSQL, p50 and p99.

Measured by timing each `store.log.append` call the executor makes (a wrapper around the
store's log) while it runs a linear chain of no-op nodes, so every append carries exactly
one node record. The floor is a bare single-row INSERT of the same bytes through the same
asyncpg pool (acquire included on both sides). Chain rounds and floor rounds alternate,
so drift on a shared machine hits both alike.
"""

from __future__ import annotations

import asyncio
import time

from bench.agents import chain
from bench.common import Line, Settings, bare_insert, open_pg, p50, pct, pg_pool, timed_log
from tether.runtime import Runtime

TARGET_P50 = 1.15


async def _measure(settings: Settings) -> list[Line]:
    rounds = settings.size(2, 4)
    per_round = settings.size(250, 500)
    store = await open_pg(settings)
    try:
        log = timed_log(store)
        pool = pg_pool(store)
        rt = Runtime(store)
        appends: list[float] = []
        floors: list[float] = []
        chain_wall: list[float] = []
        nbytes: list[int] = []
        for r in range(rounds + 1):  # round 0 warms up statements and connections
            log.appends.clear()
            t0 = time.perf_counter()
            await rt.start(chain, per_round)
            wall = time.perf_counter() - t0
            nodes = log.node_appends()
            assert all(a.rows == 1 for a in nodes), "a chain appends one node per call"
            floor = [
                await bare_insert(pool, f"floor-{r}", i, a.records[0]) for i, a in enumerate(nodes)
            ]
            if r == 0:
                continue
            appends += [a.seconds for a in nodes]
            nbytes += [a.nbytes for a in nodes]
            floors += floor
            chain_wall.append(wall / per_round)
    finally:
        await store.close()
    ms = 1000.0
    name = f"bare 1-row INSERT, p50 (same bytes, same pool, n={len(floors)})"
    record_b = p50(nbytes)
    lines = [
        Line(
            "checkpoint",
            "append 1 node record, PostgreSQL, p50",
            p50(appends) * ms,
            "ms",
            name,
            p50(floors) * ms,
            target=f"<= {TARGET_P50:.2f}x floor",
            ok=p50(appends) <= TARGET_P50 * p50(floors),
            note=f"{len(appends)} executor appends of {record_b:.0f}-byte records",
        ),
        Line(
            "checkpoint",
            "append 1 node record, PostgreSQL, p99",
            pct(appends, 0.99) * ms,
            "ms",
            name.replace("p50", "p99"),
            pct(floors, 0.99) * ms,
        ),
        Line(
            "checkpoint",
            "node end to end in a chain (run node + append + apply), PostgreSQL",
            p50(chain_wall) * ms,
            "ms",
            "bare 1-row INSERT, p50",
            p50(floors) * ms,
            note="chain wall time / nodes, p50 of rounds",
        ),
    ]
    return lines


def run(settings: Settings) -> list[Line]:
    return asyncio.run(_measure(settings))
