"""How the runs the API starts get executed: queued for workers, as `tether submit` does.

There is one claim path. `tether serve --workers embedded` (the default on SQLite) runs a
`tether.control.worker.Worker` in the server process; `--workers external` (the default on
PostgreSQL) leaves execution to `tether worker` processes. Either way the server only
queues runs, and cancels or resumes one it holds nobody else does by taking it with a
claim of its own (a fresh epoch), so a worker claiming it at the same moment is fenced.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from tether.control.actions import cancel, requeue, retry
from tether.control.worker import Worker
from tether.engine.ownership import DEFAULT_LEASE_TTL
from tether.engine.runtime import Runtime
from tether.foundation.core import Budget
from tether.model.budgets import Change
from tether.store.base import Status

log = logging.getLogger("tether.server")

EMBEDDED, EXTERNAL = "embedded", "external"


class Launcher:
    """Starts, resumes and cancels runs on behalf of the HTTP API; owns the embedded worker."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        worker: Worker | None = None,
        lease_ttl: float = DEFAULT_LEASE_TTL,
    ) -> None:
        self.runtime = runtime
        self.worker = worker
        self.leases = runtime.store.leases
        # How long the server holds a run it took to cancel or resume (a few statements).
        self.lease_ttl = lease_ttl
        self._worker_task: asyncio.Task[None] | None = None

    @classmethod
    def embedded(cls, runtime: Runtime, *, concurrency: int = 16, **worker: Any) -> Launcher:
        """A launcher whose worker executes runs in this process."""
        return cls(runtime, worker=Worker(runtime, concurrency=concurrency, **worker))

    @property
    def mode(self) -> str:
        return EXTERNAL if self.worker is None else EMBEDDED

    async def open(self) -> None:
        """Start the embedded worker: it claims queued runs and takes up ones left behind."""
        if self.worker is not None and self._worker_task is None:
            self._worker_task = asyncio.create_task(self.worker.run(), name="tether-worker")

    async def start(
        self,
        agent: str,
        input: Any,
        *,
        run_id: str,
        budget: Budget | None,
        config: dict[str, Any] | None = None,
        key: str | None = None,
        priority: int = 0,
    ) -> None:
        """Record a new run queued and wake the workers (RunExists if the id is taken)."""
        await self.runtime.submit(
            agent, input, run_id=run_id, budget=budget, config=config, key=key, priority=priority
        )

    async def resume(self, run_id: str, *, budget: Change | None) -> Status:
        """Queue a paused or orphaned run again; `budget` replaces the limits it names (a
        relative one: that much more than the run used)."""
        return await requeue(self.runtime, run_id, budget=budget, ttl=self.lease_ttl)

    async def retry(self, run_id: str) -> Status:
        """Reopen a failed run and queue it for the workers (RunNotRetryable otherwise)."""
        return await retry(self.runtime, run_id, ttl=self.lease_ttl)

    async def cancel(self, run_id: str) -> Status:
        """Stop a run for good; return its status now (the owner may still be stopping it)."""
        return await cancel(self.runtime, run_id, ttl=self.lease_ttl)

    @property
    def executing(self) -> list[str]:
        """Ids of the top-level runs executing in this process now."""
        return [r for r in self.runtime.executing if "." not in r]

    async def close(self) -> None:
        """Drain the embedded worker: its runs pause, recorded, and are released."""
        if self.worker is None or self._worker_task is None:
            return
        self.worker.stop()
        task = self._worker_task
        await asyncio.wait([task])
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("embedded worker stopped with an error", exc_info=exc)
