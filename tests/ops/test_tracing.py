"""OpenTelemetry traces with the SDK's in-memory exporter: a run is one trace, a node a
span, model calls GenAI spans, and a run killed on one worker and resumed on another is
still one trace."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tether import Context, Node, NodeResult, Registry, Runtime, Spawn, Status, Store
from tether.blobs import LocalBlobStore
from tether.control.metering import metering
from tether.foundation import tracing
from tether.foundation.tracing import span_id_of, trace_id_of

chain = Registry("test.traced", entry="step")
GATE: dict[str, asyncio.Event] = {}
REACHED: dict[str, asyncio.Event] = {}


@chain.node("step")
async def step(ctx: Context, node: Node) -> NodeResult:
    i, n = node.input["i"], node.input["n"]
    if i == 2 and node.input.get("gate"):
        REACHED[ctx.run_id].set()
        await GATE[ctx.run_id].wait()
    if i + 1 < n:
        return NodeResult(i, spawn=[Spawn("step", {**node.input, "i": i + 1}, key="next")])
    return NodeResult(i, is_result=True)


def exporter_on() -> tuple[InMemorySpanExporter, tracing.Tracing]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return exporter, tracing.Tracing(provider)


@pytest.fixture(autouse=True)
def no_global_tracing() -> Iterator[None]:
    yield
    tracing.disable()


@contextlib.asynccontextmanager
async def traced(runtime: Runtime, traces: tracing.Tracing) -> AsyncIterator[None]:
    tracing.active = traces
    try:
        async with metering(runtime):
            yield
    finally:
        tracing.active = None


def check_one_trace(spans: list[ReadableSpan], run_id: str) -> ReadableSpan:
    """Every span is in the run's trace; return the root, parent of every node span."""
    assert spans
    assert {s.context.trace_id for s in spans} == {trace_id_of(run_id)}
    (root,) = [s for s in spans if s.name == "run"]
    assert root.parent is None and root.context.span_id == span_id_of(run_id)
    for span in spans:
        if span.name.startswith("node "):
            assert span.parent is not None and span.parent.span_id == span_id_of(run_id)
            attrs = span.attributes or {}
            node_span = span_id_of(
                run_id, str(attrs["tether.node.id"]), int(attrs["tether.node.attempt"])
            )  # type: ignore[arg-type]
            assert span.context.span_id == node_span
    return root


async def test_a_run_is_a_trace_with_a_span_per_node(store: Store) -> None:
    exporter, traces = exporter_on()
    rt = Runtime(store)
    async with traced(rt, traces):
        outcome = await rt.start(chain, {"i": 0, "n": 4})
    assert outcome.status is Status.SUCCEEDED
    spans = list(exporter.get_finished_spans())
    root = check_one_trace(spans, outcome.run_id)
    nodes = sorted((s for s in spans if s.name == "node step"), key=lambda s: s.start_time or 0)
    assert len(nodes) == 4
    attrs = nodes[0].attributes or {}
    assert attrs["tether.node.kind"] == "step" and attrs["tether.node.attempt"] == 1
    assert attrs["tether.node.outcome"] == "completed"
    assert (root.attributes or {})["tether.run.status"] == "succeeded"
    assert root.start_time is not None and nodes[0].start_time is not None
    assert root.start_time <= nodes[0].start_time


async def test_a_run_killed_on_one_worker_and_resumed_on_another_is_one_trace(
    durable_store: Store,
) -> None:
    first, traces1 = exporter_on()
    second, traces2 = exporter_on()
    rt1 = Runtime(durable_store, owner="w1")
    run_id = await rt1.submit(chain, {"i": 0, "n": 5, "gate": True})
    GATE[run_id], REACHED[run_id] = asyncio.Event(), asyncio.Event()
    claim = await durable_store.leases.take(run_id, "w1", 0.5)
    assert claim is not None
    async with traced(rt1, traces1):
        task = asyncio.create_task(rt1.continue_graph(await rt1.load(run_id), epoch=claim.epoch))
        await REACHED[run_id].wait()
        task.cancel()  # the worker dies mid-node: nothing more is recorded by it
        with contextlib.suppress(asyncio.CancelledError):
            await task
    GATE[run_id].set()
    await asyncio.sleep(0.6)  # the killed worker's lease runs out
    rt2 = Runtime(durable_store, owner="w2")
    again = await durable_store.leases.take(run_id, "w2", 30)
    assert again is not None
    async with traced(rt2, traces2):
        outcome = await rt2.continue_graph(await rt2.load(run_id), epoch=again.epoch)
    assert outcome.status is Status.SUCCEEDED
    before, after = list(first.get_finished_spans()), list(second.get_finished_spans())
    assert len([s for s in before if s.name == "node step"]) == 2  # recorded before the kill
    assert len([s for s in after if s.name == "node step"]) == 3
    check_one_trace(before + after, run_id)


async def test_model_calls_follow_the_genai_conventions(
    store: Store, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TETHER_DEMO_SPEED", "0")
    from tether.demo.agent import demo_models, research

    exporter, traces = exporter_on()
    async with LocalBlobStore(tmp_path / "blobs") as blobs:  # the demo attaches its report
        rt = Runtime(store, blobs=blobs)
        async with demo_models() as _, traced(rt, traces):
            outcome = await research.run(rt, "why?")
    assert outcome.status is Status.SUCCEEDED
    spans = [s for s in exporter.get_finished_spans()
             if s.context.trace_id == trace_id_of(outcome.run_id)]  # fmt: skip
    check_one_trace(spans, outcome.run_id)
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert chats
    node_spans = {s.context.span_id for s in spans if s.name == "node turn"}
    for chat in chats:
        attrs = chat.attributes or {}
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.request.model"] and attrs["gen_ai.provider.name"]
        assert int(attrs["gen_ai.usage.input_tokens"]) > 0  # type: ignore[arg-type]
        assert int(attrs["gen_ai.usage.output_tokens"]) > 0  # type: ignore[arg-type]
        assert chat.parent is not None and chat.parent.span_id in node_spans
