"""Checkpoint cost: the executor's append of one node record on PostgreSQL, p50 and p99.

Measured by timing each `store.log.append` call the executor makes (a wrapper around the
store's log) while it runs a linear chain of no-op nodes, so every append carries exactly
one node record. The floor is a bare single-row INSERT of the same bytes through the same
asyncpg pool (acquire included on both sides), made by the wrapper right after each
append: pairs share the machine's state of the moment, so drift hits both alike.
The end-to-end line comes from separate chains with nothing around the store's log, each
round followed by bare INSERTs of that round's node records, read back from the log (its
floor).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import asyncpg

from bench.agents import chain
from bench.common import (
    Line,
    Settings,
    TimedLog,
    bare_insert,
    open_pg,
    p50,
    pct,
    pg_pool,
)
from tether.engine.runtime import Runtime
from tether.store.base import Store


class PairedLog(TimedLog):
    """A TimedLog that follows each 1-row append with a bare INSERT of the same bytes."""

    def __init__(self, store: Store, pool: asyncpg.Pool) -> None:
        super().__init__(store.log)
        self.pool = pool
        self.floors: list[float] = []

    async def append(
        self, run_id: str, entries: Sequence[tuple[int, bytes]], *, epoch: int | None = None
    ) -> None:
        await super().append(run_id, entries, epoch=epoch)
        if len(entries) == 1:
            seq, record = entries[0]
            self.floors.append(await bare_insert(self.pool, f"floor-{run_id}", seq, record))
        else:
            self.floors.append(float("nan"))


TARGET_P50 = 1.15
TARGET_END_TO_END = 1.25  # a node end to end (issue 12), against the same bare INSERT


async def _measure(settings: Settings) -> list[Line]:
    rounds = settings.size(2, 4)
    per_round = settings.size(250, 500)
    store = await open_pg(settings)
    try:
        pool = pg_pool(store)
        rt = Runtime(store)
        chain_wall: list[float] = []
        chain_floors: list[float] = []
        for r in range(rounds + 1):  # round 0 warms up statements and connections
            t0 = time.perf_counter()
            outcome = await rt.start(chain, per_round)
            if r:
                chain_wall.append((time.perf_counter() - t0) / per_round)
                # The floor right after the round, of the same bytes: drift hits both alike.
                # The node records are read back, not caught by a wrapper around the log
                # (whose own calls would be counted against the chain): all rows but the
                # run's first (RunStarted) and last (RunFinished).
                rows = await store.log.read(outcome.run_id)
                records = [record for _, record in rows[1:-1]]
                assert len(records) == per_round
                chain_floors.append(
                    p50([await bare_insert(pool, f"e2e-{r}", i, b) for i, b in enumerate(records)])
                )
        paired = PairedLog(store, pool)
        store.log = paired
        await rt.start(chain, 20)  # warm-up of the floor statement
        paired.appends.clear()
        paired.floors.clear()
        for _ in range(rounds):
            await rt.start(chain, per_round)
        pairs = [
            (a, f)
            for a, f in zip(paired.appends, paired.floors, strict=True)
            if a.rows == 1 and a.bodies[0] == "node_completed"
        ]
        appends = [a.seconds for a, _ in pairs]
        floors = [f for _, f in pairs]
        nbytes = [a.nbytes for a, _ in pairs]
    finally:
        await store.close()
    ms = 1000.0
    name = f"bare 1-row INSERT, p50 (same bytes, same pool, paired, n={len(floors)})"
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
            "bare 1-row INSERTs of the round's records right after it, p50",
            p50(chain_floors) * ms,
            target=f"<= {TARGET_END_TO_END:.2f}x floor",
            ok=p50(chain_wall) <= TARGET_END_TO_END * p50(chain_floors),
            note="chain wall time / nodes, p50 of rounds; each round's floor taken next to it",
        ),
    ]
    return lines


def run(settings: Settings) -> list[Line]:
    return asyncio.run(_measure(settings))
