"""Integrations and erasure (issue 42): a journaled streamed Agents SDK run against the same
run without tether, and what shredding a run of 5,000 records costs.

1. A streamed OpenAI Agents SDK run (triage hands off to billing, which calls a tool, then
   answers: three streamed model calls) against the local model server, run by
   `DurableRunner(stream=True)` on SQLite, paired turn by turn with the same agents run by
   `Runner.run_streamed` without tether (the floor), every event read by both.
2. `tether runs delete --shred` of a run of 5,000 records with its own data key (SQLite),
   against a plain delete of an equal run without one (the floor), run in turns.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from bench.common import Line, Settings, open_sqlite, p50
from tether.engine.context import Context
from tether.engine.registry import Registry
from tether.engine.runtime import Runtime
from tether.foundation.core import Node, NodeResult, Spawn

RECORDS = 5000


def _chain(per_run_keys: bool, n: int) -> Registry:
    reg = Registry(f"bench.shred{int(per_run_keys)}", entry="step", per_run_keys=per_run_keys)

    @reg.node("step")
    async def step(ctx: Context, node: Node) -> NodeResult:
        i = node.input["i"]
        if i + 2 >= n:
            return NodeResult({"i": i}, is_result=True)
        return NodeResult({"i": i}, spawn=[Spawn("step", {"i": i + 1}, key="n")])

    return reg


async def _shred(settings: Settings) -> list[Line]:
    from tether.blobs import LocalBlobStore
    from tether.foundation.crypto import KeyRing
    from tether.ops import delete_run

    n = settings.size(200, RECORDS)
    ring = KeyRing.new()
    shred_s: list[float] = []
    plain_s: list[float] = []
    rows = 0
    for turn in range(settings.size(2, 5)):
        for own_key in (turn % 2 == 0, turn % 2 == 1):
            store = await open_sqlite(settings, f"shred-{int(own_key)}")
            try:
                async with LocalBlobStore(settings.workdir / f"shred-blobs-{turn}") as blobs:
                    rt = Runtime(store, blobs=blobs, keys=ring)
                    await rt.start(_chain(own_key, n), {"i": 0}, run_id="r")
                    rows = len(await store.log.read_all("r"))
                    t0 = time.perf_counter()
                    await delete_run(store, "r", blobs=rt.blobs, shred=own_key)
                    (shred_s if own_key else plain_s).append(time.perf_counter() - t0)
            finally:
                await store.close()
    return [
        Line(
            "integrations",
            f"runs delete --shred, a run of {rows} records, SQLite, p50",
            p50(shred_s) * 1000,
            "ms",
            f"plain delete of an equal run without its own key, p50 (n={len(plain_s)})",
            p50(plain_s) * 1000,
            note="the key destroyed first (one statement), then rows and blobs as a delete",
        )
    ]


async def _streamed(settings: Settings) -> list[Line]:
    import openai
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        handoff,
        set_tracing_disabled,
    )

    from tether.integrations.openai_agents import DurableRunner
    from tether.testing import Message, ToolCall, ToolSpec, Turn, serve_local_models

    set_tracing_disabled(True)

    def triage(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
        return Turn(tool_calls=[ToolCall("transfer_to_billing", {})])

    def billing(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
        said = [m.text for m in messages if m.role == "tool" and "refund" in m.text]
        if not said:
            return Turn(tool_calls=[ToolCall("refund", {"order": "A1"})])
        return Turn(text="Done: " + said[0] + ". " + "The refund reaches the card in days. " * 8)

    @function_tool
    async def refund(order: str) -> str:
        """Refund an order."""
        return f"refund of {order} issued"

    durable_s: list[float] = []
    bare_s: list[float] = []
    scripts = {"triage": triage, "billing": billing}
    async with (
        serve_local_models(scripts) as server,
        openai.AsyncOpenAI(
            base_url=server.openai_base_url, api_key="local", max_retries=0
        ) as client,
    ):
        usage = ModelSettings(include_usage=True)
        bill = Agent(
            "billing",
            model=OpenAIChatCompletionsModel("script:billing", client),
            tools=[refund],
            model_settings=usage,
        )
        front = Agent(
            "triage",
            model=OpenAIChatCompletionsModel("script:triage", client),
            handoffs=[handoff(bill)],
            model_settings=usage,
        )
        runner = DurableRunner(front, name="bench.streamed", stream=True)
        store = await open_sqlite(settings, "streamed")
        try:
            rt = Runtime(store)
            seen: list[Any] = []
            rt.events.on_event(lambda run_id, node_id, e: seen.append(e))

            async def bare() -> None:
                result = Runner.run_streamed(front, "Refund A1")
                async for _ in result.stream_events():
                    pass

            await bare()  # warm-up: connections, statements
            await runner.run("Refund A1", runtime=rt)
            for turn in range(settings.size(3, 30)):
                for durable in (turn % 2 == 0, turn % 2 == 1):
                    t0 = time.perf_counter()
                    if durable:
                        await runner.run("Refund A1", runtime=rt)
                    else:
                        await bare()
                    (durable_s if durable else bare_s).append(time.perf_counter() - t0)
        finally:
            await store.close()
    return [
        Line(
            "integrations",
            "streamed Agents SDK run (3 streamed model calls, a handoff, a tool), journaled "
            "by DurableRunner(stream=True), SQLite, p50",
            p50(durable_s) * 1000,
            "ms",
            f"the same run by Runner.run_streamed without tether, p50 (n={len(bare_s)})",
            p50(bare_s) * 1000,
            note="local model server in process; tokens sent live on the event stream",
        )
    ]


def run(settings: Settings) -> list[Line]:
    lines = asyncio.run(_shred(settings))
    try:
        import agents  # noqa: F401
    except ImportError:
        return lines
    return asyncio.run(_streamed(settings)) + lines
