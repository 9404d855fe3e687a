"""pydantic-ai's deferred tool calls (approvals and external calls) as tether's durable waits.

A `TetherAgent` node whose agent run ends with `DeferredToolRequests` records the messages
it produced and spawns one wait per deferred call, and a continuation node after them:

- a call of a tool built with `requires_approval=True` waits for an approval, answered like
  a tether agent's (`{"approve": bool, "reason"?, "arguments"?}`);
- a call deferred by its tool (`raise CallDeferred(...)`, or a tool of an
  `ExternalToolset`) waits for its result, delivered by whoever runs it elsewhere:
  `{"result": <any JSON>}` is what the tool returns to the model, `{"error": "..."}` a
  failure the model sees (`ToolFailed`).

The run parks while nobody answers (no lease, no task). The continuation rebuilds the
history from its ancestors' messages and runs the agent on with the answers as
`DeferredToolResults`.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import (
    DeferredToolRequests,
    DeferredToolResults,
    ToolApproved,
    ToolDenied,
    ToolFailed,
)
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


# What the result of a deferred external call is delivered as.
RESULT_SCHEMA = {
    "type": "object",
    "properties": {"result": {}, "error": {"type": "string"}},
    "minProperties": 1,
    "maxProperties": 1,
    "additionalProperties": False,
}


async def answers(
    ctx: Context, waits: dict[str, str], calls: dict[str, str] | None = None
) -> DeferredToolResults:
    """The approvals and external results delivered to this node's waits, by tool call id."""
    results = DeferredToolResults()
    for call_id, key in (calls or {}).items():
        event = await ctx.event(key)
        if event.timed_out:
            results.calls[call_id] = ToolFailed("no result: the call's wait timed out")
        elif "error" in event.payload:
            results.calls[call_id] = ToolFailed(str(event.payload["error"]))
        else:
            results.calls[call_id] = event.payload["result"]
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
    """One wait per deferred call (an approval, or an external call's result), and the node
    that goes on once all are answered."""
    waits: dict[str, str] = {}
    calls: dict[str, str] = {}
    spawn: list[Spawn | Wait] = []
    for i, call in enumerate(requests.calls):
        key = f"call-{ctx.node_id[:12]}-{i}"
        calls[call.tool_call_id] = key
        data = {
            "tool": call.tool_name,
            "arguments": call.args_as_dict(),
            "tool_call_id": call.tool_call_id,
            "kind": requests.kind(call.tool_call_id),
            "metadata": requests.metadata.get(call.tool_call_id),
        }
        spawn.append(Wait(key, timeout=timeout, data=data, schema=RESULT_SCHEMA))
    for i, call in enumerate(requests.approvals):
        key = f"approve-{ctx.node_id[:12]}-{i}"
        waits[call.tool_call_id] = key
        data = {"tool": call.tool_name, "arguments": call.args_as_dict()}
        spawn.append(Wait(key, timeout=timeout, data=data, schema=APPROVAL_SCHEMA))
    go_on = {"approvals": waits, "calls": calls, "prompts": rest}
    spawn.append(Spawn("run", go_on, key="resume", after=[*calls.values(), *waits.values()]))
    return spawn
