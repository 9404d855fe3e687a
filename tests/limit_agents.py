"""An agent for the concurrency-limit tests: one short node that sleeps its input's seconds."""

from __future__ import annotations

import asyncio
from typing import Any

from tether import Context, Node, Registry

nap = Registry("nap")


@nap.node("nap")
async def _nap(ctx: Context, node: Node) -> Any:
    seconds = float(await ctx.run_input() or 0)
    await asyncio.sleep(seconds)
    return seconds
