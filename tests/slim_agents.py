"""A scripted agent conversation, written once by the code before slim records
(`tests/golden/v1_agent.log`, by `write_golden.py v1_agent`) and again by today's code in
`tests/test_records_slim.py`: both logs must load into equal graphs and conversations.

Turn 0 calls three tools (one fine, one with bad arguments, one that does not exist),
turn 1 calls one, turn 2 answers. Call ids, node ids and outputs are deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tether.agent import Agent, tool
from tether.testing import Message, ToolCall, ToolSpec, Turn, serve_local_models

RUN_ID = "golden"
PROMPT = "Take two notes."


@tool
async def note(i: int) -> str:
    """Write down note i."""
    return f"note {i}: " + "x" * 40


def script(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
    k = sum(m.role == "assistant" for m in messages)
    if k == 0:
        calls = [ToolCall("note", {"i": 0}), ToolCall("note", {"i": "bad"}), ToolCall("nosuch", {})]
        return Turn(text="three calls", tool_calls=calls)
    if k == 1:
        return Turn(text="one more", tool_calls=[ToolCall("note", {"i": 1})])
    return Turn(text="done: two notes")


async def conversation(store: Any) -> list[bytes]:
    """Run the conversation on `store` as run RUN_ID; its log's rows."""
    from tether.engine.runtime import Runtime

    async with serve_local_models({"slim": script}) as models:
        agent = Agent(
            "golden.slim", model="openai:script:slim", base_url=models.openai_base_url,
            tools=[note],
        )  # fmt: skip
        try:
            await Runtime(store).start(agent.registry, {"prompt": PROMPT}, run_id=RUN_ID)
        finally:
            await agent.aclose()
    rows: list[bytes] = await store.log.read_all(RUN_ID)
    return rows


def agent_for_reading() -> Agent:
    """The same agent, to read a log with (no model server needed)."""
    return Agent("golden.slim", model="openai:script:slim", tools=[note])
