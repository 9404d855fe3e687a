"""Agents for retrying failed runs: nodes that fail while an outage file exists."""

from __future__ import annotations

import os
from collections import Counter

from tether import Context, Node, NodeResult, Registry, Retry, Spawn

# Handler bodies started, by idempotency key (run_id:node_id): executions, not records.
STARTS: Counter[str] = Counter()


def _down(marker: str) -> bool:
    """The outage lasts while its marker file exists (any process can end it)."""
    return os.path.exists(marker)


agent = Registry("tests.retry_agents", entry="start")
child = Registry("tests.retry_agents:child", entry="lookup")


@agent.node("start")
async def start(ctx: Context, node: Node) -> NodeResult:
    STARTS[ctx.idempotency_key] += 1
    spawn = [
        Spawn("flaky", node.input, key="a"),
        Spawn("steady", None, key="s"),
        Spawn("join", None, key="j", after=["a", "s"]),
    ]
    return NodeResult("started", spawn=spawn)


@agent.node("flaky", retry=Retry(attempts=2, backoff=0.001))
async def flaky(ctx: Context, node: Node) -> str:
    STARTS[ctx.idempotency_key] += 1
    if _down(node.input["outage"]):
        raise ConnectionError(f"model unreachable (attempt {node.attempt})")
    if node.input.get("child"):
        return str(await ctx.run_child(child, node.input, key="c"))
    return f"answer after attempt {node.attempt}"


@agent.node("steady")
async def steady(ctx: Context, node: Node) -> str:
    STARTS[ctx.idempotency_key] += 1
    return "steady"


@agent.node("join")
async def join(ctx: Context, node: Node) -> NodeResult:
    STARTS[ctx.idempotency_key] += 1
    outputs = await ctx.parent_outputs()
    return NodeResult(sorted(outputs.values()), is_result=True)


@child.node("lookup")
async def lookup(ctx: Context, node: Node) -> NodeResult:
    STARTS[ctx.idempotency_key] += 1
    if _down(node.input["child_outage"]):
        raise ConnectionError("child's model unreachable")
    return NodeResult("child's answer", is_result=True)
