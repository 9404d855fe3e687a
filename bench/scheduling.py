"""Hot scheduling: the executor's own cost per node, with no-op handlers on `memory:`.

A chain of no-op nodes appends one record per node (a full loop turn each: launch task,
wait, encode, append, apply); a fan-out of no-op siblings shows the batched case. Both are
wall time / nodes. The floor is what asyncio itself charges for one node's task: create it
and await it, measured in the same loop. With uvloop installed the chain runs again on it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

from bench.agents import chain, fan
from bench.common import Line, Settings, p50
from tether.engine.runtime import Runtime
from tether.store import store_from_url

TARGET_US = 20.0  # per node (issue 12) ...
TARGET_FLOOR_RATIO = 4.0  # ... and at most 4x create_task + await in the same run
# The root's record lists every sibling's spec; 1,000 keep it under the 64 KiB record cap.
FAN_WIDTH = 1000


async def _noop() -> None:
    return None


async def _task_floor(n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        await asyncio.ensure_future(_noop())
    return (time.perf_counter() - t0) / n


async def _per_node(nodes: int, *, fanout: bool) -> float:
    store = store_from_url("memory:")
    async with store:
        rt = Runtime(store, concurrency=max(64, nodes))
        if fanout:
            graph = await rt.create(fan, {"width": nodes - 1, "sleep_s": 0})
        else:
            graph = await rt.create(chain, nodes)
        t0 = time.perf_counter()
        outcome = await rt.execute(graph)
        wall = time.perf_counter() - t0
        assert outcome.graph.completed_count == nodes, outcome.reason
        return wall / nodes


async def _measure(nodes: int, reps: int) -> dict[str, float]:
    await _per_node(200, fanout=False)  # warm-up
    chain_s, fan_s, floor_s = [], [], []
    for _ in range(reps):
        chain_s.append(await _per_node(nodes, fanout=False))
        fan_s.append(await _per_node(min(nodes, FAN_WIDTH + 1), fanout=True))
        floor_s.append(await _task_floor(nodes))
    return {"chain": p50(chain_s), "fan": p50(fan_s), "floor": p50(floor_s)}


def _run_on(
    factory: Callable[[], asyncio.AbstractEventLoop] | None,
    main: Coroutine[Any, Any, dict[str, float]],
) -> dict[str, float]:
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def run(settings: Settings) -> list[Line]:
    nodes = settings.size(2000, 10_000)
    reps = settings.size(3, 5)
    loops: list[tuple[str, Callable[[], asyncio.AbstractEventLoop] | None]] = [("asyncio", None)]
    try:
        import uvloop

        loops.append(("uvloop", uvloop.new_event_loop))
    except ImportError:
        pass
    lines = []
    us = 1e6
    width = min(nodes - 1, FAN_WIDTH)
    for name, factory in loops:
        m = _run_on(factory, _measure(nodes, reps))
        floor_name = f"create_task + await on {name}"
        lines += [
            Line(
                "scheduling",
                f"per node, chain of {nodes:,} no-op nodes, memory:, {name}",
                m["chain"] * us,
                "us",
                floor_name,
                m["floor"] * us,
                target=f"<= {TARGET_US:g} us, <= {TARGET_FLOOR_RATIO:g}x",
                ok=m["chain"] <= min(TARGET_US / us, TARGET_FLOOR_RATIO * m["floor"]),
                note="one append per node",
            ),
            Line(
                "scheduling",
                f"per node, fan-out of {width:,} no-op siblings, memory:, {name}",
                m["fan"] * us,
                "us",
                floor_name,
                m["floor"] * us,
                target=f"<= {TARGET_US:g} us, <= {TARGET_FLOOR_RATIO:g}x",
                ok=m["fan"] <= min(TARGET_US / us, TARGET_FLOOR_RATIO * m["floor"]),
                note="siblings that complete together share an append",
            ),
        ]
    return lines
