"""Journaled steps (issue 17): what one `ctx.step` costs, and what a conversation logs per turn.

1. Per-step cost on PostgreSQL: a node takes N steps of a ~300-byte result; each
   `await ctx.step(...)` is timed whole (encode, append, apply). Right after each step the
   node makes a bare single-row INSERT of the very bytes that step appended, through the
   store's own pool: pairs share the machine's state of the moment.
2. Bytes per turn of a 50-turn pydantic-ai conversation (a tool call every fifth turn) run
   by `TetherAgent` against the local model server: the run's whole log (every row, framing
   included) over 50, next to the JSON of each turn's new messages (pydantic-ai's own
   `ModelMessagesTypeAdapter`) from the same conversation run without tether.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import asyncpg

from bench.agents import TEXT
from bench.common import Line, Settings, bare_insert, open_pg, open_sqlite, p50, pct, pg_pool
from tether.engine.context import Context
from tether.engine.registry import Registry
from tether.engine.runtime import Runtime
from tether.foundation.core import Node, NodeResult
from tether.store.base import LogStore, Store

stepper = Registry("bench.steps", entry="loop")
TURNS = 50


class _LastBytes(LogStore):
    """Passes appends through and keeps the last one's bytes (for the paired INSERT)."""

    def __init__(self, inner: LogStore) -> None:
        self.inner = inner
        self.last: tuple[int, bytes] = (0, b"")

    async def append(
        self, run_id: str, entries: Sequence[tuple[int, bytes]], *, epoch: int | None = None
    ) -> None:
        await self.inner.append(run_id, entries, epoch=epoch)
        self.last = entries[-1]

    async def read(self, run_id: str, *, after_seq: int = -1) -> list[tuple[int, bytes]]:
        return await self.inner.read(run_id, after_seq=after_seq)

    async def read_all(self, run_id: str) -> list[bytes]:
        return await self.inner.read_all(run_id)


_PROBE: dict[str, Any] = {}


@stepper.node("loop")
async def loop(ctx: Context, node: Node) -> NodeResult:
    """Take `input` steps, timing each and pairing it with a bare INSERT of its bytes."""
    log: _LastBytes = _PROBE["log"]
    pool: asyncpg.Pool = _PROBE["pool"]
    steps: list[float] = _PROBE["steps"]
    floors: list[float] = _PROBE["floors"]
    sizes: list[int] = _PROBE["sizes"]
    for i in range(node.input):
        t0 = time.perf_counter()
        await ctx.step("tool", _tool, i)
        steps.append(time.perf_counter() - t0)
        seq, data = log.last
        sizes.append(len(data))
        floors.append(await bare_insert(pool, f"floor-{ctx.run_id}", seq, data))
    return NodeResult(node.input, is_result=True)


def _tool(i: int) -> dict[str, Any]:
    return {"i": i, "text": TEXT}


async def _step_cost(settings: Settings) -> list[Line]:
    per_run = settings.size(200, 1000)
    store = await open_pg(settings)
    try:
        log = _LastBytes(store.log)
        store.log = log
        _PROBE.update(log=log, pool=pg_pool(store), steps=[], floors=[], sizes=[])
        rt = Runtime(store)
        await rt.start(stepper, 20)  # warm-up: statements and connections
        for key in ("steps", "floors", "sizes"):
            _PROBE[key].clear()
        for _ in range(settings.size(1, 3)):
            await rt.start(stepper, per_run)
        steps, floors, sizes = _PROBE["steps"], _PROBE["floors"], _PROBE["sizes"]
    finally:
        await store.close()
    ms = 1000.0
    name = f"bare 1-row INSERT, p50 (same bytes, same pool, paired, n={len(floors)})"
    return [
        Line(
            "steps",
            "journaled step (ctx.step: run, encode, append, apply), PostgreSQL, p50",
            p50(steps) * ms,
            "ms",
            name,
            p50(floors) * ms,
            note=f"{len(steps)} steps of {p50(sizes):.0f}-byte records",
        ),
        Line(
            "steps",
            "journaled step, PostgreSQL, p99",
            pct(steps, 0.99) * ms,
            "ms",
            name.replace("p50", "p99"),
            pct(floors, 0.99) * ms,
        ),
    ]


async def _bytes_per_turn(settings: Settings) -> list[Line]:
    import openai
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessagesTypeAdapter
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from tether.integrations.pydantic_ai import TetherAgent, TetherDurability
    from tether.testing import Message, ToolCall, ToolSpec, Turn, serve_local_models

    def chat(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
        turn = sum(m.role == "user" for m in messages)
        if turn % 5 == 0 and messages[-1].role == "user":
            return Turn(tool_calls=[ToolCall("lookup", {"topic": f"topic {turn}"})])
        return Turn(text=f"Turn {turn}: {TEXT}")

    prompts = [f"Question {i}: what about topic {i}?" for i in range(1, TURNS + 1)]
    async with (
        serve_local_models({"chat": chat}) as server,
        openai.AsyncOpenAI(base_url=server.openai_base_url, api_key="x") as client,
    ):
        model = OpenAIChatModel("script:chat", provider=OpenAIProvider(openai_client=client))
        agent = Agent(model, name="chat", capabilities=[TetherDurability()])

        @agent.tool_plain
        def lookup(topic: str) -> str:
            """Look a topic up."""
            return f"{topic}: three sources agree."

        # Without tether: the JSON of each turn's new messages.
        json_bytes, history = 0, None
        for prompt in prompts:
            result = await agent.run(prompt, message_history=history)
            json_bytes += len(ModelMessagesTypeAdapter.dump_json(result.new_messages()))
            history = result.all_messages()
        store: Store = await open_sqlite(settings, "steps-bytes")
        try:
            durable = TetherAgent(agent, name="bench.steps.chat")
            outcome = await durable.run(prompts, runtime=Runtime(store))
            assert outcome.status.value == "succeeded", outcome.reason
            rows = await store.log.read_all(outcome.run_id)
        finally:
            await store.close()
    log_bytes = sum(map(len, rows))
    return [
        Line(
            "steps",
            f"log bytes per turn, {TURNS}-turn pydantic-ai conversation",
            log_bytes / TURNS,
            "B",
            "JSON of the turn's new messages (pydantic-ai)",
            json_bytes / TURNS,
            note=f"{len(rows)} records; history rebuilt from steps, never stored",
        )
    ]


def run(settings: Settings) -> list[Line]:
    lines = asyncio.run(_step_cost(settings))
    try:
        import pydantic_ai  # noqa: F401
    except ImportError:
        return lines
    return lines + asyncio.run(_bytes_per_turn(settings))
