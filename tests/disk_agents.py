"""An agent that grows its log: a chain of nodes, each recording a few kilobytes (half of
them through a journaled step), for the full-disk tests; `tether resume` finds it by its
import path in another process."""

from __future__ import annotations

import hashlib
from typing import Any

from tether import Context, Node, NodeResult, Registry, Spawn

filler = Registry("tests.disk_agents:filler", entry="fill")


def payload(i: int, size: int) -> str:
    """`size` characters that depend on `i` only (a re-run records the same bytes), and do
    not compress (PostgreSQL would squeeze a repeated block into a few bytes)."""
    blocks = (hashlib.sha256(f"{i}:{k}".encode()).hexdigest() for k in range(size // 64 + 1))
    return "".join(blocks)[:size]


@filler.node("fill")
async def fill(ctx: Context, node: Node) -> NodeResult:
    spec: dict[str, Any] = node.input
    i, nodes, size = spec.get("i", 0), spec["nodes"], spec["size"]
    if i % 2:  # its bytes recorded by a step, then the node's own record
        text = await ctx.step("write", payload, i, size)
    else:
        text = payload(i, size)
    if i + 1 == nodes:
        return NodeResult({"filled": nodes, "last": text[:16]}, is_result=True)
    return NodeResult({"i": i, "text": text}, spawn=[Spawn("fill", {**spec, "i": i + 1})])
