"""Deterministic agents used by the executor and replay tests."""

from __future__ import annotations

import asyncio
import hashlib
import random
import uuid
from collections import Counter
from typing import Any

from tether import Context, Node, NodeResult, Registry, Retry, Spawn, Usage

# How many times each (run_id, node_id) handler body started: executions, not records.
EXECUTIONS: Counter[str] = Counter()
# How many `work` nodes of each run were in flight at once, at most.
IN_FLIGHT: Counter[str] = Counter()
MAX_IN_FLIGHT: Counter[str] = Counter()


def _h(*parts: Any) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:6], "big")


# -- fan-out and join -------------------------------------------------------------

fanout = Registry("test.fanout", entry="start")


@fanout.node("start")
async def start(ctx: Context, node: Node) -> NodeResult:
    EXECUTIONS[ctx.idempotency_key] += 1
    n = node.input["width"]
    spawn = [
        Spawn("work", {"i": i, "delay": node.input.get("delay", 0)}, key=f"w{i}") for i in range(n)
    ]
    spawn.append(Spawn("join", None, key="join", after=[f"w{i}" for i in range(n)]))
    return NodeResult({"width": n}, spawn=spawn)


@fanout.node("work")
async def work(ctx: Context, node: Node) -> int:
    EXECUTIONS[ctx.idempotency_key] += 1
    IN_FLIGHT[ctx.run_id] += 1
    MAX_IN_FLIGHT[ctx.run_id] = max(MAX_IN_FLIGHT[ctx.run_id], IN_FLIGHT[ctx.run_id])
    try:
        if node.input["delay"]:
            await asyncio.sleep(node.input["delay"])
    finally:
        IN_FLIGHT[ctx.run_id] -= 1
    ctx.add_usage(Usage(tokens_in=10, tokens_out=5, cost=0.001))
    return int(node.input["i"]) ** 2


@fanout.node("join")
async def join(ctx: Context, node: Node) -> NodeResult:
    EXECUTIONS[ctx.idempotency_key] += 1
    outputs = await ctx.parent_outputs()
    return NodeResult(sum(outputs.values()), is_result=True)


# -- random dynamic graphs (the replay property test) -----------------------------

randomgraph = Registry("test.random", entry="node")
randomchild = Registry("test.random.child", entry="node")


async def _random_node(ctx: Context, node: Node, *, child: bool) -> NodeResult:
    """A node whose behaviour is a pure function of its input and its parents' outputs."""
    EXECUTIONS[ctx.idempotency_key] += 1
    seed, depth = node.input["seed"], node.input["depth"]
    rng = random.Random(seed)
    if rng.random() < 0.25 and ctx.attempt == 1:
        raise ConnectionError(f"transient failure of {seed}")  # retried: attempts=2
    parents = [await ctx.output_of(p) for p in node.parent_ids]
    value = _h(seed, parents) % 10_000
    if not child and depth < 3 and rng.random() < 0.2:
        sub = await ctx.run_child(randomchild, {"seed": seed + 1, "depth": 2}, key="sub")
        value = (value + sub) % 10_000
    if rng.random() < 0.3 and ctx.attempt == 1:
        await asyncio.sleep(0.001 * rng.randint(0, 3))
    usage = Usage(tokens_in=value % 7, tokens_out=1)
    # The root's value is the run's result (a sub-agent's answer to its parent).
    is_result = not node.parent_ids
    if depth >= 4:
        return NodeResult(value, usage=usage, is_result=is_result)
    width = rng.randint(0, 3)
    spawn = [
        Spawn("node", {"seed": _h(seed, i), "depth": depth + 1}, key=str(i)) for i in range(width)
    ]
    if width >= 2 and rng.random() < 0.6:
        spawn.append(
            Spawn("node", {"seed": _h(seed, "j"), "depth": depth + 1}, key="j", after=["0", "1"])
        )
    return NodeResult(value, spawn=spawn, usage=usage, is_result=is_result)


@randomgraph.node("node", retry=Retry(attempts=2, backoff=0.001))
async def random_node(ctx: Context, node: Node) -> NodeResult:
    return await _random_node(ctx, node, child=False)


@randomchild.node("node", retry=Retry(attempts=2, backoff=0.001))
async def random_child_node(ctx: Context, node: Node) -> NodeResult:
    return await _random_node(ctx, node, child=True)


def uid(prefix: str) -> str:
    """A run id no other test (or parametrization) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
