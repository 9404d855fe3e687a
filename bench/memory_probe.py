"""One memory measurement in its own process: `python -m bench.memory_probe hot|held N`.

hot N: execute a chain of N no-op nodes and keep its graph. held N: start N runs of a chain
that parks in its 11th node (waiting on an event) and measure while all N are parked.
Prints `{"rss_delta": bytes, "log_bytes": bytes}` as its last line.
"""

from __future__ import annotations

import asyncio
import gc
import json
import sys
from collections.abc import Sequence

from bench.agents import chain
from bench.common import rss_bytes
from tether.engine.context import Context
from tether.engine.registry import Registry
from tether.engine.runtime import Runtime
from tether.foundation.core import Node, NodeResult, Spawn
from tether.store import store_from_url
from tether.store.base import LogStore

PARK_AFTER = 10
parked = Registry("bench.parked", entry="step")
_gate: asyncio.Event | None = None
_arrived: list[str] = []
_all_arrived: asyncio.Event | None = None
_expected = 0


@parked.node("step")
async def park_step(ctx: Context, node: Node) -> NodeResult:
    depth: int = node.input
    if depth < PARK_AFTER:
        return NodeResult(output={"depth": depth}, spawn=[Spawn("step", depth + 1)])
    assert _gate is not None and _all_arrived is not None
    _arrived.append(ctx.run_id)
    if len(_arrived) == _expected:
        _all_arrived.set()
    await _gate.wait()
    return NodeResult(output={"depth": depth}, is_result=True)


class DiscardLog(LogStore):
    """Counts appended bytes and keeps none of them."""

    def __init__(self) -> None:
        self.nbytes = 0

    async def append(
        self, run_id: str, entries: Sequence[tuple[int, bytes]], *, epoch: int | None = None
    ) -> None:
        self.nbytes += sum(len(r) for _, r in entries)

    async def read(self, run_id: str, *, after_seq: int = -1) -> list[tuple[int, bytes]]:
        return []


def settle() -> int:
    gc.collect()
    return rss_bytes()


async def hot(n: int, rt: Runtime, log: DiscardLog) -> dict[str, float]:
    await rt.start(chain, 200)  # warm-up: code paths, caches, allocator arenas
    log.nbytes = 0
    before = settle()
    outcome = await rt.start(chain, n)
    after = settle()
    assert outcome.graph.completed_count == n
    return {"rss_delta": after - before, "log_bytes": log.nbytes}


async def held(n: int, rt: Runtime, log: DiscardLog) -> dict[str, float]:
    global _gate, _all_arrived, _expected
    _gate, _all_arrived, _expected = asyncio.Event(), asyncio.Event(), 1
    warm = asyncio.ensure_future(rt.start(parked, 0))
    await _all_arrived.wait()
    _gate.set()
    await warm
    _gate, _all_arrived, _expected = asyncio.Event(), asyncio.Event(), n
    _arrived.clear()
    log.nbytes = 0
    before = settle()
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(rt.start(parked, 0)) for _ in range(n)]
        await _all_arrived.wait()
        after = settle()
        nbytes = log.nbytes
        _gate.set()
    assert all(t.result().graph.completed_count == PARK_AFTER + 1 for t in tasks)
    return {"rss_delta": after - before, "log_bytes": nbytes}


async def main(case: str, n: int) -> None:
    store = store_from_url("memory:")
    log = DiscardLog()
    # Every append goes to the discarding log: the records themselves, a run's first (with
    # its row) and its last (with its release), so the store holds no log bytes at all.
    store.log = log
    for port in (store.runs, store.leases):
        port._log = log  # type: ignore[attr-defined]
    rt = Runtime(store)
    report = await (hot if case == "hot" else held)(n, rt, log)
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
