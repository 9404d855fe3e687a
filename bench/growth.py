"""Growth: record bytes and append time at node 10, 100, 1,000 and 10,000 of one run.

A chain of 10,000 no-op nodes on PostgreSQL (run twice), every executor append timed by a wrapper
around the log. At each checkpoint node k the line shows the median append time and record
size of the nodes up to k (the last 50 at most; the chain's very last record spawns nothing
and is smaller); the floor is the same figure at node 10. "Flat" is read as: within 1.10x
of node 10 for bytes (a record may grow by a digit or two of its input) and 1.30x for
append time (the machine is noisy).

Append times are medians of every run's samples pooled, about a hundred on each side: at a
checkpoint, the window of each long run; at node 10, the first ten appends of every run,
long and short (short chains of 10 nodes run before each long one). Each side was once the
lower of the two runs' medians, which has no equal footing: the lower of two medians of 10
samples lies further below the typical append than the lower of two medians of 50, so
the floor read low and the same code passed and missed by turns (1.01x at 21:33; 1.33x
and 1.15x in two runs of the same commit at 23:36).
"""

from __future__ import annotations

import asyncio

from bench.agents import chain
from bench.common import Line, Settings, open_pg, p50, timed_log
from tether.engine.runtime import Runtime

AT = (10, 100, 1_000, 10_000)
WINDOW = 50
FLAT_BYTES = 1.10
FLAT_TIME = 1.30
RUNS = 2
SHORT_RUNS = 5  # before each long run: node-10 samples as many as a checkpoint's


async def _measure(settings: Settings) -> list[Line]:
    store = await open_pg(settings)
    try:
        log = timed_log(store)
        rt = Runtime(store)
        await rt.start(chain, 50)  # warm-up
        runs, short = [], []
        for _ in range(RUNS):
            for _ in range(SHORT_RUNS):
                log.appends.clear()
                await rt.start(chain, AT[0])
                short.append(log.node_appends())
            log.appends.clear()
            await rt.start(chain, AT[-1])
            runs.append(log.node_appends())
            assert len(runs[-1]) == AT[-1]
    finally:
        await store.close()

    def at(k: int) -> tuple[float, int]:
        windows = [nodes[max(0, k - WINDOW) : k] for nodes in runs]
        timed = windows + [nodes[:k] for nodes in short] if k == AT[0] else windows
        ms = p50([a.seconds for w in timed for a in w]) * 1000
        return ms, round(p50([a.nbytes for a in windows[0]]))

    base_ms, base_b = at(AT[0])
    lines = []
    for k in AT[1:]:
        ms, nbytes = at(k)
        lines += [
            Line(
                "growth",
                f"record bytes at node {k:,} (p50 of the {WINDOW} before)",
                nbytes,
                "B",
                f"record bytes at node {AT[0]}",
                base_b,
                target=f"<= {FLAT_BYTES:.2f}x",
                ok=nbytes <= FLAT_BYTES * base_b,
            ),
            Line(
                "growth",
                f"append time at node {k:,} (p50 of the {WINDOW} before, {RUNS} runs), PostgreSQL",
                ms,
                "ms",
                f"the same at node {AT[0]} (the first {AT[0]} of {RUNS * (SHORT_RUNS + 1)} runs)",
                base_ms,
                target=f"<= {FLAT_TIME:.2f}x",
                ok=ms <= FLAT_TIME * base_ms,
            ),
        ]
    return lines


def run(settings: Settings) -> list[Line]:
    return asyncio.run(_measure(settings))
