"""Feed this process's metrics and traces from a runtime while it serves (server, worker)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from tether.engine.registry import ON_IMPORT, declared_kinds
from tether.engine.runtime import Runtime
from tether.foundation import metrics, tracing
from tether.model.records import Record, started_at_us_of

# Seconds between samples of the runs table for the `tether_runs` gauge.
SAMPLE_EVERY_S = 5.0


@contextlib.asynccontextmanager
async def metering(
    runtime: Runtime, open_streams: Callable[[], float] | None = None
) -> AsyncIterator[None]:
    """While inside: the runtime's records feed the metrics and traces, and the runs gauge
    is sampled from its store. Nothing for what is not enabled in this process."""
    async with contextlib.AsyncExitStack() as stack:
        if tracing.active is not None:
            stack.callback(runtime.events.on_record(_tracer_of(runtime, tracing.active)))
        if metrics.active is not None:
            await stack.enter_async_context(_metered(runtime, metrics.active, open_streams))
        yield


def _tracer_of(runtime: Runtime, traces: tracing.Tracing) -> Callable[[str, int, Record], None]:
    def started_us(run_id: str) -> int | None:
        # The run's span starts with its first node: the executor still holds its graph.
        executor = runtime.executing.get(run_id)
        if executor is None:
            return None
        starts = [
            start
            for s in executor.graph.nodes.values()
            if s.completed is not None and (start := started_at_us_of(s.completed))
        ]
        return min(starts, default=None)

    def on_record(run_id: str, seq: int, record: Record) -> None:
        traces.on_record(run_id, record, started_us)

    return on_record


@contextlib.asynccontextmanager
async def _metered(
    runtime: Runtime, active: metrics.Metrics, open_streams: Callable[[], float] | None
) -> AsyncIterator[None]:
    # The agents served are imported by now: their kinds (and their sub-agents') are the
    # label values, and those of an agent imported later by name; a kind made up at run
    # time counts as `other`.
    def declare() -> None:
        active.declare_kinds(declared_kinds())

    declare()
    ON_IMPORT.append(declare)
    unsubscribe = runtime.events.on_record(active.on_record)
    if open_streams is not None:
        active.track_streams(open_streams)
    sampler = asyncio.create_task(
        active.sample_runs(runtime.store.runs.count_by_status, SAMPLE_EVERY_S)
    )
    try:
        yield
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler
        unsubscribe()
        ON_IMPORT.remove(declare)
