"""Agents for the signal tests, run by `tether worker` subprocesses (`tests.signal_agents:x`).

Each node says where it is by creating a file the test named in its input: the test's
handshake, so every signal lands at a known point, never after a guessed sleep.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tether import Context, Node, NodeResult, Registry, Retry, Spawn

# A node that never finishes on its own and ignores a drain: only cancelling it ends it.
stuck = Registry("test.signals.stuck", entry="root")


@stuck.node("root")
async def stuck_root(ctx: Context, node: Node) -> NodeResult:
    return NodeResult("root", spawn=[Spawn("hold", node.input, key="hold")])


@stuck.node("hold")
async def hold(ctx: Context, node: Node) -> str:
    await asyncio.to_thread(Path(node.input["started"]).touch)
    if await asyncio.to_thread(Path(node.input["release"]).exists):
        return "released"
    await asyncio.Event().wait()
    return "never"


# A node whose first attempt fails and whose retry waits ten minutes.
patient = Registry("test.signals.patient", entry="root")


@patient.node("root")
async def patient_root(ctx: Context, node: Node) -> NodeResult:
    return NodeResult("root", spawn=[Spawn("flaky", node.input, key="flaky")])


@patient.node(
    "flaky", retry=Retry(attempts=3, backoff=600.0, max_backoff=600.0, retry_on=(ConnectionError,))
)
async def flaky(ctx: Context, node: Node) -> NodeResult:
    failed = Path(node.input["failed"])
    if not await asyncio.to_thread(failed.exists):
        await asyncio.to_thread(failed.touch)
        raise ConnectionError("the first attempt always fails")
    return NodeResult(f"attempt {ctx.attempt}", is_result=True)
