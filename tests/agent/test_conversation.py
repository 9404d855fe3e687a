"""A turn's prompt extends the previous turn's (kept per run) and equals the ancestor walk."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from tether import Budget, Runtime, Status, Store
from tether.agent import Agent, tool
from tether.agent.conversation import Conversations
from tether.agent.messages import Message as ChatMessage
from tether.engine.context import Context
from tether.testing import (
    LocalModelServer,
    Message,
    ToolCall,
    ToolSpec,
    Turn,
    serve_local_models,
)

TURNS = 5


@tool
async def note(i: int) -> str:
    """Write down note i."""
    return f"note {i}"


def notes(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Turn:
    """Two tool calls a turn (the second needs the first's index), then an answer."""
    k = sum(m.role == "assistant" for m in messages)
    if k < TURNS - 1:
        return Turn(
            text=f"turn {k}", tool_calls=[ToolCall("note", {"i": k}), ToolCall("note", {"i": -k})]
        )
    return Turn(text="done")


class Checked(Agent):
    """Checks every prompt against a full walk of the ancestors, and counts the walks."""

    walks: list[str]

    async def _walk_history(self, ctx: Context) -> list[ChatMessage]:
        self.walks.append(ctx.node_id)
        return await super()._walk_history(ctx)

    async def history(self, ctx: Context) -> list[ChatMessage]:
        messages = await super().history(ctx)
        assert messages == await Agent._walk_history(self, ctx)  # not counted
        return messages


@pytest.fixture
async def models() -> AsyncIterator[LocalModelServer]:
    async with serve_local_models({"notes": notes}) as server:
        yield server


def checked(models: LocalModelServer, **kw: Any) -> Checked:
    agent = Checked(
        "test-notes",
        model="openai:script:notes",
        base_url=models.openai_base_url,
        tools=[note],
        **kw,
    )
    agent.walks = []
    return agent


async def test_only_the_first_turn_walks_its_ancestors(
    models: LocalModelServer, store: Store
) -> None:
    async with checked(models) as agent:
        outcome = await agent.run(Runtime(store), "Take notes.")
        assert outcome.status is Status.SUCCEEDED
        assert outcome.graph.model_calls == TURNS
        assert agent.walks == ["root"]
        # The last turn answered: nothing is kept for a run no turn follows.
        assert len(agent._conversations) == 0
        transcript = await agent.transcript(Runtime(store), outcome.run_id)
    assert len(transcript) == 1 + (TURNS - 1) * 3 + 1


async def test_a_resumed_run_walks_once_then_extends(
    models: LocalModelServer, store: Store
) -> None:
    async with checked(models, budget=Budget(max_turns=2)) as first:
        paused = await first.run(Runtime(store), "Take notes.")
    assert paused.status is Status.PAUSED
    async with checked(models) as second:  # another process: nothing kept for this run
        rt = Runtime(store)
        done = await rt.resume(paused.run_id, budget=Budget(max_turns=10))
        assert done.status is Status.SUCCEEDED
        # The agent registered last under the name runs the resumed turns: the first of
        # them walks the ancestors (two turns recorded by then), the next ones extend it.
        assert first.walks == ["root"]
        assert len(second.walks) == 1 and second.walks != ["root"]


def test_conversations_keep_the_last_prompt_per_run_and_evict_the_oldest() -> None:
    kept = Conversations(runs=2)
    kept.keep("a", "t1", [{"role": "user", "content": "a"}])
    kept.keep("b", "t1", [{"role": "user", "content": "b"}])
    assert kept.prompt_of("a", "t1") == ({"role": "user", "content": "a"},)  # a: most recent
    assert kept.prompt_of("a", "t0") is None  # only the last turn's prompt is kept
    kept.keep("c", "t1", [])
    assert kept.prompt_of("b", "t1") is None and len(kept) == 2
    kept.forget("a")
    assert kept.prompt_of("a", "t1") is None
