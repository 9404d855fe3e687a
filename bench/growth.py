"""Growth: record bytes and append time at node 10, 100, 1,000 and 10,000 of one run.

A chain of 10,000 no-op nodes on PostgreSQL (run twice), every executor append timed by a wrapper
around the log. At each checkpoint node k the line shows the median append time and record
size of the nodes up to k (the last 50 at most; the chain's very last record spawns nothing
and is smaller); the floor is the same figure at node 10. "Flat" is read as: within 1.10x
of node 10 for bytes (a record may grow by a digit or two of its input) and 1.30x for
append time (the machine is noisy).
"""

from __future__ import annotations

import asyncio

from bench.agents import chain
from bench.common import Line, Settings, open_pg, p50, timed_log
from tether.runtime import Runtime

AT = (10, 100, 1_000, 10_000)
WINDOW = 50
FLAT_BYTES = 1.10
FLAT_TIME = 1.30
RUNS = 2


async def _measure(settings: Settings) -> list[Line]:
    store = await open_pg(settings)
    try:
        log = timed_log(store)
        rt = Runtime(store)
        await rt.start(chain, 50)  # warm-up
        runs = []
        for _ in range(RUNS):
            log.appends.clear()
            await rt.start(chain, AT[-1])
            runs.append(log.node_appends())
            assert len(runs[-1]) == AT[-1]
    finally:
        await store.close()

    def at(k: int) -> tuple[float, int]:
        # The faster of the runs at each point: a noisy neighbour slows one, not both.
        windows = [nodes[max(0, k - WINDOW) : k] for nodes in runs]
        ms = min(p50([a.seconds for a in w]) for w in windows) * 1000
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
                f"append time at node {k:,} (p50 of the {WINDOW} before), PostgreSQL",
                ms,
                "ms",
                f"the same at node {AT[0]} ({min(AT[0], WINDOW)} appends)",
                base_ms,
                target=f"<= {FLAT_TIME:.2f}x",
                ok=ms <= FLAT_TIME * base_ms,
            ),
        ]
    return lines


def run(settings: Settings) -> list[Line]:
    return asyncio.run(_measure(settings))
