"""pydantic-ai's deferred tool approvals as tether's durable waits.

A `TetherAgent` node whose agent run ends with `DeferredToolRequests` (a tool built with
`requires_approval=True`) records the messages it produced and spawns one wait per call,
answered like a tether agent's approvals (`{"approve": bool, "reason"?, "arguments"?}`), and
a continuation node after them. The run parks while nobody answers. The continuation
rebuilds the history from its ancestors' messages and runs the agent on with the answers
as `DeferredToolResults`.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter

from tether.agent.loop import APPROVAL_SCHEMA
from tether.engine.context import Context
from tether.foundation.core import Spawn, Wait
from tether.model.waits import WAIT_KIND


async def history_of(ctx: Context) -> list[ModelMessage] | None:
    """The messages the agent nodes before this one recorded, oldest first (None: none)."""
    chain: list[str] = []
    nid = ctx.node_id
    while parents := ctx.parents_of(nid):
        nid = parents[0]
        if ctx.kind_of(nid) == WAIT_KIND:
            nid = ctx.parents_of(nid)[0]
        chain.append(nid)
    if not chain:
        return None
    recorded: list[Any] = []
    for node_id in reversed(chain):
        recorded += (await ctx.output_of(node_id)).get("messages", [])
    return ModelMessagesTypeAdapter.validate_python(recorded)


async def answers(ctx: Context, waits: dict[str, str]) -> DeferredToolResults:
    """The approvals delivered to this node's waits, by tool call id."""
    results = DeferredToolResults()
    for call_id, key in waits.items():
        event = await ctx.event(key)
        if event.timed_out:
            results.approvals[call_id] = ToolDenied("not run: approval timed out")
        elif not event.payload["approve"]:
            reason = event.payload.get("reason") or "no reason given"
            results.approvals[call_id] = ToolDenied(f"not run: rejected ({reason})")
        elif "arguments" in event.payload:
            results.approvals[call_id] = ToolApproved(override_args=event.payload["arguments"])
        else:
            results.approvals[call_id] = True
    return results


def ask(
    ctx: Context, requests: DeferredToolRequests, rest: list[str], *, timeout: float | None
) -> list[Spawn | Wait]:
    """One wait per call waiting for approval, and the node that goes on once all answered."""
    if requests.calls:
        names = [c.tool_name for c in requests.calls]
        raise TypeError(f"external tool calls {names} are not supported on tether; use approvals")
    waits: dict[str, str] = {}
    spawn: list[Spawn | Wait] = []
    for i, call in enumerate(requests.approvals):
        key = f"approve-{ctx.node_id[:12]}-{i}"
        waits[call.tool_call_id] = key
        data = {"tool": call.tool_name, "arguments": call.args_as_dict()}
        spawn.append(Wait(key, timeout=timeout, data=data, schema=APPROVAL_SCHEMA))
    go_on = {"approvals": waits, "prompts": rest}
    spawn.append(Spawn("run", go_on, key="resume", after=list(waits.values())))
    return spawn
