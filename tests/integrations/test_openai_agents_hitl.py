"""The OpenAI Agents SDK on tether, with the SDK's tracing ON: streamed runs, handoffs with
`on_handoff`, and tool approvals as durable waits (real SDK, the local model server)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import openai
import pytest

pytest.importorskip("agents")

from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    function_tool,
    handoff,
    set_trace_processors,
    set_tracing_disabled,
)
from agents.tracing import Span, Trace, TracingProcessor

from tests.ops.test_tracing import exporter_on, traced
from tether import Runtime, Status, Store
from tether.foundation import tracing
from tether.integrations.openai_agents import DurableRunner
from tether.model.records import decode_log
from tether.testing import LocalModelServer, Message, ToolCall, ToolSpec, Turn, serve_local_models

REFUNDED: list[str] = []
HANDED: list[str] = []  # on_handoff's side effects
HANG: dict[str, asyncio.Event] = {}


class Kept(TracingProcessor):
    """The SDK's traces and spans, kept in memory (instead of exported to the network)."""

    def __init__(self) -> None:
        self.traces: list[Trace] = []
        self.spans: list[Span[Any]] = []

    def on_trace_start(self, trace: Trace) -> None:
        self.traces.append(trace)

    def on_trace_end(self, trace: Trace) -> None:
        pass

    def on_span_start(self, span: Span[Any]) -> None:
        pass

    def on_span_end(self, span: Span[Any]) -> None:
        self.spans.append(span)

    def shutdown(self) -> None:
        pass

    def force_flush(self) -> None:
        pass

    def kinds(self) -> list[str]:
        return [s.span_data.type for s in self.spans]


@pytest.fixture
def sdk_traces() -> Iterator[Kept]:
    kept = Kept()
    set_trace_processors([kept])  # replaces the exporter to OpenAI's backend
    set_tracing_disabled(False)
    yield kept
    set_tracing_disabled(True)
    tracing.disable()


def triage(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
    return Turn(tool_calls=[ToolCall("escalate_to_billing", {"reason": "refund"})])


def billing(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
    said = [m.text for m in messages if m.role == "tool" and "refund" in m.text]
    if not said:
        return Turn(tool_calls=[ToolCall("refund", {"order": "A1"})])
    return Turn(text="Done: " + said[0])


@pytest.fixture
async def models() -> AsyncIterator[LocalModelServer]:
    REFUNDED.clear()
    HANDED.clear()
    HANG.clear()
    async with serve_local_models({"triage": triage, "billing": billing}) as server:
        yield server


@pytest.fixture
async def client(models: LocalModelServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=models.openai_base_url, api_key="local", max_retries=0
    ) as oai:
        yield oai


def desk(client: openai.AsyncOpenAI, *, approval: bool = False, **kw: Any) -> DurableRunner:
    from pydantic import BaseModel

    @function_tool(needs_approval=approval)
    async def refund(order: str) -> str:
        """Refund an order."""
        if order in HANG:
            HANG[order].set()
            await asyncio.Event().wait()
        REFUNDED.append(order)
        return f"refund of {order} issued"

    class Why(BaseModel):
        reason: str

    async def note(ctx: Any, why: Why) -> None:  # a side effect of the handoff
        HANDED.append(why.reason)

    usage = ModelSettings(include_usage=True)  # streamed chat completions report usage
    bill = Agent(
        "billing",
        model=OpenAIChatCompletionsModel("script:billing", client),
        tools=[refund],
        model_settings=usage,
    )
    front = Agent(
        "triage",
        model=OpenAIChatCompletionsModel("script:triage", client),
        model_settings=usage,
        handoffs=[handoff(bill, tool_name_override="escalate_to_billing", on_handoff=note,
                          input_type=Why)],
    )  # fmt: skip
    return DurableRunner(front, name=kw.pop("name", "test.openai_agents.desk"), **kw)


async def steps_of(store: Store, run_id: str) -> list[str]:
    rows = await store.log.read_all(run_id)
    return [r.step_recorded.name for r in decode_log(run_id, rows) if r.HasField("step_recorded")]


async def test_a_streamed_run_sends_tokens_live_and_records_each_model_call_whole(
    durable_store: Store, models: LocalModelServer, client: openai.AsyncOpenAI, sdk_traces: Kept
) -> None:
    runtime = Runtime(durable_store)
    tokens: list[str] = []
    runtime.events.on_event(
        lambda run_id, node_id, e: tokens.append(e["text"]) if e["type"] == "token" else None
    )
    exporter, traces = exporter_on()  # tether's OpenTelemetry export on too
    async with traced(runtime, traces):
        outcome = await desk(client, stream=True).run("Refund A1", runtime=runtime)
    assert outcome.status is Status.SUCCEEDED, outcome.reason
    assert outcome.result == {"content": "Done: refund of A1 issued", "last_agent": "billing"}
    assert "".join(tokens) == "Done: refund of A1 issued"
    assert all(r.stream for r in models.requests) and len(models.requests) == 3
    assert await steps_of(durable_store, outcome.run_id) == [
        "triage.model.stream",
        "triage.handoff:escalate_to_billing",
        "billing.model.stream",
        "billing.tool:refund",
        "billing.model.stream",
    ]
    assert HANDED == ["refund"] and REFUNDED == ["A1"]
    assert outcome.graph.model_calls == 3 and outcome.graph.tokens > 0
    # Both tracers kept their spans: the SDK's (agents, model calls, the tool, the handoff)
    # and tether's (the run, its node).
    kinds = sdk_traces.kinds()
    assert {"agent", "handoff", "function"} <= set(kinds)
    assert kinds.count("response") + kinds.count("generation") == 3
    names = {s.name for s in exporter.get_finished_spans()}
    assert "run" in names and any(n.startswith("node ") for n in names)
    # Replayed in another runtime: nothing is asked again, no token is sent again.
    again = await Runtime(durable_store).load(outcome.run_id)
    assert again.status is Status.SUCCEEDED


async def test_a_run_killed_mid_stream_resumes_without_asking_or_handing_off_again(
    durable_store: Store, models: LocalModelServer, client: openai.AsyncOpenAI, sdk_traces: Kept
) -> None:
    runner = desk(client, stream=True)
    reached = HANG["A1"] = asyncio.Event()
    runtime = Runtime(durable_store)
    run_id = await runner.submit("Refund A1", runtime=runtime)
    task = asyncio.ensure_future(runtime.resume(run_id))
    await reached.wait()  # the handoff done, billing's first streamed answer recorded
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    HANG.clear()
    assert HANDED == ["refund"] and REFUNDED == []
    outcome = await Runtime(durable_store).resume(run_id)
    assert outcome.status is Status.SUCCEEDED, outcome.reason
    assert outcome.result["content"] == "Done: refund of A1 issued"
    assert HANDED == ["refund"]  # on_handoff ran once
    assert REFUNDED == ["A1"]
    assert [r.model for r in models.requests] == ["script:triage"] + ["script:billing"] * 2


async def test_tool_approvals_are_durable_waits_that_survive_a_restart(
    durable_store: Store, models: LocalModelServer, client: openai.AsyncOpenAI, sdk_traces: Kept
) -> None:
    rt = Runtime(durable_store)
    parked = await desk(client, approval=True).run("Refund A1", runtime=rt)
    assert parked.status is Status.WAITING, parked.reason
    info = await durable_store.runs.get(parked.run_id)
    assert info is not None and info.owner is None  # parked: no lease, no task
    (wait,) = parked.graph.pending_waits()
    data = await rt.new_codec().decode(wait.spec.data)
    assert data == {"tool": "refund", "arguments": {"order": "A1"}, "agent": "billing"}
    assert REFUNDED == []
    # A restart while waiting: another runtime delivers the answer, a third goes on.
    await Runtime(durable_store).signal(parked.run_id, wait.key, {"approve": True})
    done = await Runtime(durable_store).resume(parked.run_id)
    assert done.status is Status.SUCCEEDED, done.reason
    assert done.result == {"content": "Done: refund of A1 issued", "last_agent": "billing"}
    assert REFUNDED == ["A1"] and HANDED == ["refund"]
    # Triage and billing's first answer were not asked again after the approval.
    assert [r.model for r in models.requests] == ["script:triage"] + ["script:billing"] * 2


async def test_a_rejected_approval_tells_the_model_and_runs_nothing(
    durable_store: Store, models: LocalModelServer, client: openai.AsyncOpenAI, sdk_traces: Kept
) -> None:
    models.scripts.add(
        "billing",
        lambda messages, tools, /: (
            Turn(text="Told: " + [m.text for m in messages if m.role == "tool"][-1])
            if any(m.role == "tool" and "rejected" in m.text for m in messages)
            else billing(messages, tools)
        ),
    )
    rt = Runtime(durable_store)
    parked = await desk(client, approval=True).run("Refund A1", runtime=rt)
    (wait,) = parked.graph.pending_waits()
    await rt.signal(parked.run_id, wait.key, {"approve": False, "reason": "over the limit"})
    done = await rt.resume(parked.run_id)
    assert done.status is Status.SUCCEEDED, done.reason
    assert done.result["content"] == "Told: not run: rejected (over the limit)"
    assert REFUNDED == []


async def test_a_run_killed_mid_stream_asks_only_the_interrupted_call_again(
    durable_store: Store, models: LocalModelServer, client: openai.AsyncOpenAI, sdk_traces: Kept
) -> None:
    import threading

    answering = threading.Event()  # the server may answer on its own thread

    def slow_billing(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
        turn = billing(messages, tools)
        if turn.text and not answering.is_set():  # the final answer, the first time:
            answering.set()  # its stream opens, then sends one chunk an hour
            return Turn(text=turn.text, chunk_delay=3600.0)
        return turn

    models.scripts.add("billing", slow_billing)
    runtime = Runtime(durable_store)
    run_id = await desk(client, stream=True).submit("Refund A1", runtime=runtime)
    task = asyncio.ensure_future(runtime.resume(run_id))
    await asyncio.to_thread(answering.wait)  # the answer is streaming: killed mid-stream
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await steps_of(durable_store, run_id) == [
        "triage.model.stream",
        "triage.handoff:escalate_to_billing",
        "billing.model.stream",
        "billing.tool:refund",
    ]
    outcome = await Runtime(durable_store).resume(run_id)
    assert outcome.status is Status.SUCCEEDED, outcome.reason
    assert outcome.result["content"] == "Done: refund of A1 issued"
    # Only the interrupted call was asked again; the handoff and the refund ran once.
    assert [r.model for r in models.requests] == ["script:triage"] + ["script:billing"] * 3
    assert HANDED == ["refund"] and REFUNDED == ["A1"]
