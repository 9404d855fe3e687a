"""Agents with large values and attached files, for the offloading tests."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

from tests.agents import EXECUTIONS
from tether import Context, Node, NodeResult, Registry, Spawn

offload = Registry("test.offload", entry="produce")


def _count(ctx: Context) -> None:
    """Count executions in memory, and in a file when a subprocess test asks for it."""
    EXECUTIONS[ctx.idempotency_key] += 1
    path = os.environ.get("TETHER_TEST_EXECUTIONS")
    if path:
        with open(path, "a") as f:
            f.write(f"{ctx.idempotency_key}\n")


def text(n: int, seed: str = "x") -> str:
    """A deterministic string of n characters (re-runs store the same bytes)."""
    return (seed * n)[:n]


async def _chunks(n: int, seed: bytes) -> AsyncIterator[bytes]:
    for i in range(0, n, 64 * 1024):
        yield (seed * (64 * 1024))[: min(64 * 1024, n - i)]


@offload.node("produce")
async def produce(ctx: Context, node: Node) -> NodeResult:
    """Output `out` characters, attach `attach` bytes, spawn a consumer with `spawn` chars."""
    _count(ctx)
    spec = node.input
    if spec.get("attach"):
        await ctx.attach(b"A" * spec["attach"], "text/plain")
        await ctx.attach(_chunks(spec["attach"] * 2, b"B"), "application/x-stream")
    return NodeResult(
        {"text": text(spec.get("out", 0))},
        spawn=[Spawn("consume", {"pad": text(spec.get("spawn", 0), "y")}, key="c")],
    )


@offload.node("consume")
async def consume(ctx: Context, node: Node) -> NodeResult:
    """Read the parent's output, attachments and the run input; report their sizes."""
    _count(ctx)
    (parent,) = node.parent_ids
    out = await ctx.output_of(parent)
    attached = [len(await ctx.read_blob(ref)) for ref in ctx.attachments_of(parent)]
    run_input = await ctx.run_input()
    result = {
        "parent_len": len(out["text"]),
        "input_len": len(node.input["pad"]),
        "attached": attached,
        "run_input_len": len(run_input.get("big", "")),
        "result": text(run_input.get("result", 0), "r"),
    }
    return NodeResult(result, is_result=True)
