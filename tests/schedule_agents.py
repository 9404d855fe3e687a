"""An agent for the schedule tests: one node that answers with its input."""

from __future__ import annotations

from typing import Any

from tether import Context, Node, Registry

tick = Registry("tick")


@tick.node("tick")
async def _tick(ctx: Context, node: Node) -> Any:
    return await ctx.run_input()
