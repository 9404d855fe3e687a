"""An agent for the model-outage tests: a turn that calls a tool, then an answer, on the
local model server at TETHER_TEST_MODEL_URL (read when the module is imported, so a `tether`
process started with it calls the server there; tests in this process set `base_url`)."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence

from tether.agent import Agent, tool
from tether.testing import Message, ToolCall, ToolSpec, Turn

URL = os.environ.get("TETHER_TEST_MODEL_URL", "http://127.0.0.1:9")
# What the tool awaits between the two turns (a test sets it: to take the model down).
BETWEEN: list[Callable[[], Awaitable[None]]] = []


@tool
async def add(a: int, b: int) -> int:
    """Add two numbers."""
    while BETWEEN:
        await BETWEEN.pop(0)()
    return a + b


def adder(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Turn:
    """Ask for 2 + 3, then answer with what the tool said."""
    if not any(m.role == "tool" for m in messages):
        return Turn(text="Adding.", tool_calls=[ToolCall("add", {"a": 2, "b": 3})])
    return Turn(text="2 + 3 = " + [m.text for m in messages if m.role == "tool"][-1])


SCRIPTS = {"adder": adder}

# Two attempts 10 ms apart, so a test's outage pauses the run at once.
outage_agent = Agent(
    "tests.outage_agents:outage",
    model="openai:script:adder",
    tools=[add],
    base_url=URL + "/v1",
    model_attempts=2,
    model_backoff=0.01,
)
outage = outage_agent.registry

# A model no provider serves: refused before any run of it is recorded.
bogus = Agent("tests.outage_agents:bogus", model="bogus:model-x").registry
