"""An agent whose one node ticks: a line to a file every 100 ms, the side effect a lost
lease must stop (`tests/test_ownership.py`). Found by name: `tests.ownership_agents`."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from tether import Context, Node, NodeResult, Registry

agent = Registry("tests.ownership_agents", entry="tick")
# Set once a run's handler has written two lines (in this process).
WRITING: dict[str, asyncio.Event] = {}


def write(out: Path, line: str) -> None:
    with out.open("a") as f:
        f.write(line + "\n")


@agent.node("tick")
async def tick(ctx: Context, node: Node) -> NodeResult:
    """Write `pid n` every 100 ms, `ticks` times, or until a `stop` file appears beside
    the output; `pid cancelled` if cancelled."""
    out = Path(node.input["out"])
    stop = out.with_name("stop")
    me = os.getpid()
    try:
        for n in range(node.input["ticks"]):
            if stop.exists():
                break
            write(out, f"{me} {n}")
            if n == 1:
                WRITING.setdefault(ctx.run_id, asyncio.Event()).set()
            await asyncio.sleep(0.1)
    except asyncio.CancelledError:
        write(out, f"{me} cancelled")
        raise
    return NodeResult("ticked", is_result=True)
