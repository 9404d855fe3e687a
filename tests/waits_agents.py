"""Agents that wait: for approvals (events), for timeouts, and durable sleeps."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from tether import Context, Node, NodeResult, Registry, Sleep, Spawn, Wait

# How many times each (run_id, node_id) handler body started.
EXECUTIONS: Counter[str] = Counter()
# Lets a test hold the `slow` sibling of a wait in flight: set to let it finish.
RELEASE: dict[str, asyncio.Event] = {}
# Set when the `slow` node of a run has started.
SLOW_STARTED: dict[str, asyncio.Event] = {}

APPROVAL = {
    "type": "object",
    "properties": {"approve": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["approve"],
}

approvals = Registry("test.waits.approvals", entry="ask")


@approvals.node("ask")
async def ask(ctx: Context, node: Node) -> NodeResult:
    """Ask for `n` approvals at once; each approved action runs once its answer arrives."""
    EXECUTIONS[ctx.idempotency_key] += 1
    n, timeout = node.input.get("n", 1), node.input.get("timeout")
    spawn: list[Spawn | Wait | Sleep] = []
    for i in range(n):
        data = {"tool": "delete_file", "args": {"path": f"/tmp/{i}"}}
        spawn.append(Wait(f"approve-{i}", timeout=timeout, data=data, schema=APPROVAL))
        spawn.append(Spawn("act", {"i": i}, key=f"act-{i}", after=[f"approve-{i}"]))
    if node.input.get("slow"):
        spawn.append(Spawn("slow", None, key="slow"))
    spawn.append(Spawn("join", None, key="join", after=[f"act-{i}" for i in range(n)]))
    return NodeResult({"asked": n}, spawn=spawn)


@approvals.node("act")
async def act(ctx: Context, node: Node) -> dict[str, Any]:
    EXECUTIONS[ctx.idempotency_key] += 1
    event = await ctx.event(f"approve-{node.input['i']}")
    if event.timed_out:
        return {"i": node.input["i"], "outcome": "timed out"}
    return {"i": node.input["i"], "outcome": "done" if event.payload["approve"] else "rejected"}


@approvals.node("slow")
async def slow(ctx: Context, node: Node) -> str:
    EXECUTIONS[ctx.idempotency_key] += 1
    SLOW_STARTED.setdefault(ctx.run_id, asyncio.Event()).set()
    await RELEASE.setdefault(ctx.run_id, asyncio.Event()).wait()
    return "slow done"


@approvals.node("join")
async def join(ctx: Context, node: Node) -> NodeResult:
    outcomes = await ctx.parent_outputs()
    return NodeResult(sorted((o["i"], o["outcome"]) for o in outcomes.values()), is_result=True)


sleeper = Registry("test.waits.sleeper", entry="nap")


@sleeper.node("nap")
async def nap(ctx: Context, node: Node) -> NodeResult:
    seconds = node.input["seconds"]
    return NodeResult(
        "napping", spawn=[Sleep("nap", seconds=seconds), Spawn("wake", None, after=["nap"])]
    )


@sleeper.node("wake")
async def wake(ctx: Context, node: Node) -> NodeResult:
    event = await ctx.event("nap")
    return NodeResult({"slept": event.timed_out}, is_result=True)


parent = Registry("test.waits.parent", entry="delegate")


@parent.node("delegate")
async def delegate(ctx: Context, node: Node) -> NodeResult:
    """Runs the approvals agent as a sub-agent run: its waits park this run too."""
    EXECUTIONS[ctx.idempotency_key] += 1
    result = await ctx.run_child(approvals, node.input)
    return NodeResult({"child": result}, is_result=True)
