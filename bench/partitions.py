"""Partitioning: append and load on run_log hash-partitioned by run_id, against the plain table.

The same work on the same database, first on the plain table, then after
`tether db migrate --partitions 16` (with every row of the first half still there): the
executor's 1-record appends of a chain of no-op nodes (p50), and `Runtime.load` of a
5,000-node run (p50). The floor of each line is the plain table's figure.
"""

from __future__ import annotations

import asyncio
import time

from bench.agents import chain
from bench.common import Line, Settings, open_pg, p50, timed_log
from bench.rehydrate import make_log
from tether.engine.runtime import Runtime
from tether.store import migrate_url

PARTITIONS = 16
LOAD_NODES = 5000


async def _figures(settings: Settings, tag: str, rows: list[bytes]) -> tuple[float, float]:
    """(append p50 s, load p50 s) on the bench database as it is now."""
    store = await open_pg(settings)
    try:
        log = timed_log(store)
        rt = Runtime(store)
        await rt.start(chain, 20)  # warm-up
        log.appends.clear()
        for _ in range(settings.size(2, 4)):
            await rt.start(chain, settings.size(100, 250))
        appends = [a.seconds for a in log.node_appends() if a.rows == 1]
        run_id = f"load-{tag}"
        await store.log.append(run_id, list(enumerate(rows)))
        await rt.load(run_id)
        loads = []
        for _ in range(settings.size(5, 11)):
            t0 = time.perf_counter()
            await rt.load(run_id)
            loads.append(time.perf_counter() - t0)
        return p50(appends), p50(loads)
    finally:
        await store.close()


async def _measure(settings: Settings) -> list[Line]:
    rows = await make_log(LOAD_NODES)
    plain = await _figures(settings, "plain", rows)
    await migrate_url(settings.pg_url, partitions=PARTITIONS)
    try:
        parted = await _figures(settings, "parted", rows)
    finally:
        await migrate_url(settings.pg_url, partitions=1)
    ms = 1000.0
    return [
        Line(
            "partitions",
            f"append 1 node record, run_log in {PARTITIONS} hash partitions, p50",
            parted[0] * ms,
            "ms",
            "the same on the plain table",
            plain[0] * ms,
        ),
        Line(
            "partitions",
            f"load {LOAD_NODES:,}-node run, run_log in {PARTITIONS} hash partitions, p50",
            parted[1] * ms,
            "ms",
            "the same on the plain table",
            plain[1] * ms,
        ),
    ]


def run(settings: Settings) -> list[Line]:
    return asyncio.run(_measure(settings))
