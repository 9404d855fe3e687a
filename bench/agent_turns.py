"""The agent layer: log bytes per turn and prompt-building time in a 200-turn conversation.

One agent talks to the local scripted model server through the real OpenAI SDK; every turn
calls one tool whose result is a 400-character note, so the conversation grows by two
messages a turn. The log must hold only each turn's delta: bytes per turn stay flat, and
a turn's prompt extends the previous turn's (kept per run; a run new to the process walks
its ancestors once, shown as an informational line). Floors: the JSON of the turn's new messages
(bytes), and parsing the same conversation stored whole as JSON (time).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Sequence

from bench.common import Line, Settings, open_sqlite
from tether.agent import Agent, tool
from tether.agent.messages import Message as ChatMessage
from tether.engine.context import Context
from tether.engine.runtime import Runtime
from tether.testing import Message, ToolCall, ToolSpec, Turn, serve_local_models

TARGET_BYTES_RATIO = 1.1  # log bytes per turn against the JSON of its new messages
TARGET_PROMPT_US = 100.0  # building the prompt of the last turn (turn 200 in a full run)
LAST_TURNS = 10  # the prompt-build figure is the median of this many last turns


@tool
async def note(i: int) -> str:
    """Write down note i."""
    return f"note {i}: " + "x" * 391


def script_for(turns: int):  # type: ignore[no-untyped-def]
    def script(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
        k = sum(m.role == "assistant" for m in messages)
        if k < turns - 1:
            return Turn(text=f"turn {k}", tool_calls=[ToolCall("note", {"i": k})])
        return Turn(text="done")

    return script


class TimedAgent(Agent):
    """Records how long each turn's prompt took to build, and how big it was."""

    timings: list[tuple[int, float]]
    walks: list[float]  # the walk of all ancestors the last turn would take without the cache
    walk_at: int  # the turn whose walk is timed (only that one: a walk's garbage would
    # otherwise land in the next turn's timed build as a collection)

    async def history(self, ctx: Context) -> list[ChatMessage]:
        t0 = time.perf_counter()
        messages = await super().history(ctx)
        self.timings.append((len(messages), time.perf_counter() - t0))
        if len(self.timings) == self.walk_at:
            t0 = time.perf_counter()
            await Agent._walk_history(self, ctx)
            self.walks.append(time.perf_counter() - t0)
        return messages


async def _measure(settings: Settings) -> list[Line]:
    turns = settings.size(50, 200)
    async with serve_local_models({"long": script_for(turns)}) as models:
        agent = TimedAgent(
            "bench.long", model="openai:script:long", base_url=models.openai_base_url, tools=[note]
        )
        agent.timings = []
        agent.walks = []
        agent.walk_at = turns
        store = await open_sqlite(settings, "agent")
        try:
            outcome = await agent.run(Runtime(store), "Take notes.")
            rows = await store.log.read_all(outcome.run_id)
            transcript = await agent.transcript(Runtime(store), outcome.run_id)
        finally:
            await store.close()
            await agent.aclose()
    assert outcome.graph.model_calls == turns
    log_bytes = sum(len(r) for r in rows)
    per_turn = log_bytes / turns
    # The delta a turn adds: its assistant message and its tool result, as JSON.
    delta = sum(len(json.dumps(m)) for m in transcript[1:]) / turns
    # One build takes tens of microseconds, so one sample is at the mercy of the machine: the
    # median of the last LAST_TURNS turns' builds (each within a few messages of the last).
    size = agent.timings[-1][0]
    last = statistics.median(t for _, t in agent.timings[-LAST_TURNS:])
    blob = json.dumps(transcript[:size]).encode()
    t0 = time.perf_counter()
    for _ in range(20):
        json.loads(blob)
    parse = (time.perf_counter() - t0) / 20
    return [
        Line(
            "agent",
            f"log bytes per turn, {turns}-turn conversation (turn + tool record)",
            per_turn,
            "B",
            "JSON of the turn's new messages",
            delta,
            target=f"<= {TARGET_BYTES_RATIO:g}x",
            ok=per_turn <= TARGET_BYTES_RATIO * delta,
            note=f"{log_bytes} bytes in all; storing the whole history each turn would be "
            f"{sum(len(json.dumps(transcript[:i])) for i in range(1, len(transcript), 2))} bytes",
        ),
        Line(
            "agent",
            f"prompt build at turns {turns - LAST_TURNS + 1}-{turns}, median (up to {size} "
            "messages, each extending the previous turn's)",
            last * 1e6,
            "us",
            "json.loads of the same conversation stored whole",
            parse * 1e6,
            target=f"<= {TARGET_PROMPT_US:g} us",
            ok=last * 1e6 <= TARGET_PROMPT_US,
        ),
        Line(
            "agent",
            f"  walk of all ancestors at turn {turns} (a run new to this process, once)",
            agent.walks[-1] * 1e6,
            "us",
            "json.loads of the same conversation stored whole",
            parse * 1e6,
        ),
    ]


def run(settings: Settings) -> list[Line]:
    return asyncio.run(_measure(settings))
