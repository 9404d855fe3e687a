"""Overlap: 40 independent nodes that each wait 50 ms, with durable appends.

A run whose root spawns 40 leaves that each sleep 50 ms (simulated model or tool I/O), timed
from `Runtime.start` to its outcome: creating the run, the root, the leaves, their appends
and the finish record all count. The ideal is one 50 ms wait; its measured floor is
`asyncio.gather` of 40 such sleeps in the same loop.
"""

from __future__ import annotations

import asyncio
import time

from bench.agents import fan
from bench.common import Line, Settings, open_pg, open_sqlite, p50
from tether.engine.runtime import Runtime
from tether.store import Store

WIDTH = 40
WAIT_S = 0.050
TARGET_MS = 60.0


async def _runs(store: Store, reps: int) -> list[float]:
    rt = Runtime(store)
    await rt.start(fan, {"width": 2, "sleep_s": 0})  # warm-up
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        outcome = await rt.start(fan, {"width": WIDTH, "sleep_s": WAIT_S})
        out.append(time.perf_counter() - t0)
        assert outcome.graph.completed_count == WIDTH + 1
    return out


async def _gather_floor(reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        await asyncio.gather(*(asyncio.sleep(WAIT_S) for _ in range(WIDTH)))
        out.append(time.perf_counter() - t0)
    return out


async def _measure(settings: Settings) -> list[Line]:
    reps = settings.size(3, 7)
    floor = p50(await _gather_floor(reps)) * 1000
    lines = []
    for backend in ("SQLite", "PostgreSQL"):
        store = await (
            open_pg(settings) if backend == "PostgreSQL" else open_sqlite(settings, "overlap")
        )
        try:
            wall = p50(await _runs(store, reps)) * 1000
        finally:
            await store.close()
        lines.append(
            Line(
                "overlap",
                f"{WIDTH} nodes x {WAIT_S * 1000:g} ms I/O, {backend}, whole run, p50",
                wall,
                "ms",
                f"ideal {WAIT_S * 1000:g} ms (asyncio.gather of {WIDTH} sleeps)",
                floor,
                target=f"< {TARGET_MS:g} ms",
                ok=wall < TARGET_MS,
                note=f"p50 of {reps}",
            )
        )
    return lines


def run(settings: Settings) -> list[Line]:
    return asyncio.run(_measure(settings))
