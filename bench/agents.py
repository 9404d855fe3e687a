"""The agents the benchmarks run: a linear chain and a fan-out, with no-op or sleeping nodes."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tether.engine.context import Context
from tether.engine.registry import Registry
from tether.foundation.core import Node, NodeResult, Spawn

# A model turn's output is a few hundred bytes of text; this makes a record ~300 bytes,
# the size the DESIGN's measured facts use.
TEXT = "The quick brown fox jumps over the lazy dog; " * 3

chain = Registry("bench.chain", entry="step")
# perf_counter() when this process first ran a chain step (the fresh-process recovery bench).
first_step_at: float | None = None
fan = Registry("bench.fan", entry="root")


@chain.node("step")
async def step(ctx: Context, node: Node) -> NodeResult:
    """Node n of a chain of `input` nodes: spawn the next one until none is left."""
    global first_step_at
    if first_step_at is None:
        first_step_at = time.perf_counter()
    left: int = node.input
    output = {"left": left, "text": TEXT}
    if left <= 1:
        return NodeResult(output=output, is_result=True)
    return NodeResult(output=output, spawn=[Spawn("step", left - 1)])


@fan.node("root")
async def root(ctx: Context, node: Node) -> NodeResult:
    """Spawn `width` independent leaves that each wait `sleep_s` seconds."""
    params: dict[str, Any] = node.input
    return NodeResult(
        output={"width": params["width"]},
        spawn=[Spawn("leaf", params["sleep_s"]) for _ in range(params["width"])],
    )


@fan.node("leaf")
async def leaf(ctx: Context, node: Node) -> dict[str, str]:
    """Simulated I/O (a model or tool call) of `input` seconds; 0 means a no-op."""
    if node.input:
        await asyncio.sleep(node.input)
    return {"text": TEXT}
