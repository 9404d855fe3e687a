"""Feed this process's metrics from a runtime while it serves (server or worker)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from tether import metrics
from tether.runtime import Runtime

# Seconds between samples of the runs table for the `tether_runs` gauge.
SAMPLE_EVERY_S = 5.0


@contextlib.asynccontextmanager
async def metering(
    runtime: Runtime, open_streams: Callable[[], float] | None = None
) -> AsyncIterator[None]:
    """While inside: the runtime's records feed the metrics, and the runs gauge is sampled
    from its store. Nothing when metrics are not enabled in this process."""
    active = metrics.active
    if active is None:
        yield
        return
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
