"""`@tool(approval=...)`: a model's call to such a tool waits for a person before it runs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest

from tether import Runtime, Status, Store
from tether.agent import Agent, tool
from tether.testing import LocalModelServer, Message, ToolCall, ToolSpec, Turn

DELETED: list[str] = []


@tool(approval=True)
async def delete_file(path: str) -> str:
    """Delete a file."""
    DELETED.append(path)
    return f"deleted {path}"


@tool(approval=lambda args: args["amount"] > 100)
async def pay(amount: int) -> str:
    """Pay an amount."""
    return f"paid {amount}"


def cleanup(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Turn:
    if sum(m.role == "assistant" for m in messages) == 0:
        return Turn(
            text="Cleaning up.",
            tool_calls=[
                ToolCall("delete_file", {"path": "/tmp/a"}),
                ToolCall("delete_file", {"path": "/etc/passwd"}),
                ToolCall("pay", {"amount": 5}),
                ToolCall("pay", {"amount": 500}),
                ToolCall("delete_file", {"path": 7}),
            ],
        )
    return Turn(text="Done: " + " | ".join(m.text for m in messages if m.role == "tool"))


@pytest.fixture
async def models() -> AsyncIterator[LocalModelServer]:
    from tether.testing import serve_local_models

    async with serve_local_models({"cleanup": cleanup}) as server:
        yield server


async def test_tool_calls_wait_for_approval_and_take_rejections_and_edits(
    models: LocalModelServer, store: Store
) -> None:
    DELETED.clear()
    async with Agent(
        "test-approvals",
        model="openai:script:cleanup",
        tools=[delete_file, pay],
        base_url=models.openai_base_url,
    ) as agent:
        rt = Runtime(store)
        parked = await agent.run(rt, "Clean up.")
        assert parked.status is Status.WAITING
        waits = {w.key: w for w in parked.graph.pending_waits()}
        # Two deletes and the large payment ask; the small payment and the call with bad
        # arguments (answered to the model as an error) do not.
        assert len(waits) == 3
        data = [await rt.new_codec().decode(w.spec.data) for w in waits.values()]
        assert sorted((d["tool"], str(d["arguments"])) for d in data) == [
            ("delete_file", "{'path': '/etc/passwd'}"),
            ("delete_file", "{'path': '/tmp/a'}"),
            ("pay", "{'amount': 500}"),
        ]
        key_of = {(d["tool"], str(d["arguments"])): k for d, k in zip(data, waits, strict=True)}
        await rt.signal(
            parked.run_id,
            key_of[("delete_file", "{'path': '/tmp/a'}")],
            {"approve": True, "arguments": {"path": "/tmp/a-edited"}},
        )
        await rt.signal(
            parked.run_id,
            key_of[("delete_file", "{'path': '/etc/passwd'}")],
            {"approve": False, "reason": "never touch /etc"},
        )
        # An edit that does not fit the tool's arguments goes back to the model as an error.
        await rt.signal(
            parked.run_id, key_of[("pay", "{'amount': 500}")],
            {"approve": True, "arguments": {"amount": "lots"}},
        )  # fmt: skip
        done = await rt.resume(parked.run_id)
        assert done.status is Status.SUCCEEDED, done.reason
        assert DELETED == ["/tmp/a-edited"]
        transcript = await agent.transcript(rt, done.run_id)
        results = [m["content"] for m in transcript if m["role"] == "tool"]
        assert results[0] == "deleted /tmp/a-edited"
        assert results[1] == "not run: rejected (never touch /etc)"
        assert results[2] == "paid 5"
        assert "amount: Input should be a valid integer" in results[3]
        assert "path: Input should be a valid string" in results[4]
        assert done.result["content"].startswith("Done: deleted /tmp/a-edited")
