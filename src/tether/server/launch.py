"""How the runs the API starts get executed: queued for workers, as `tether submit` does.

There is one claim path. `tether serve --workers embedded` (the default on SQLite) runs a
`tether.worker.Worker` in the server process; `--workers external` (the default on
PostgreSQL) leaves execution to `tether worker` processes. Either way the server only
queues runs, and cancels or resumes one it holds nobody else does by taking it with a
claim of its own (a fresh epoch), so a worker claiming it at the same moment is fenced.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

from tether.core import Budget
from tether.errors import RunNotResumable, TetherError, UnknownRun
from tether.records import budget_of, limits_of, run_resumed
from tether.runtime import Runtime
from tether.store.base import Claim, Status
from tether.worker import DEFAULT_LEASE_TTL, Worker

log = logging.getLogger("tether.server")

EMBEDDED, EXTERNAL = "embedded", "external"


class RunBusy(TetherError):
    """The run is executing already, so it cannot be resumed now."""


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
    ) -> None:
        """Record a new run queued and wake the workers (RunExists if the id is taken)."""
        await self.runtime.submit(agent, input, run_id=run_id, budget=budget, config=config)

    async def resume(self, run_id: str, *, budget: dict[str, float] | None) -> Status:
        """Queue a paused or orphaned run again; `budget` replaces the limits it names.

        The new limits are recorded (RunResumed) under the server's own claim, so the
        worker that claims the run next rehydrates them from the log like everything else.
        """
        if run_id in self.runtime.executing:
            raise RunBusy(f"run {run_id} is executing; nothing to resume")
        claim = await self.leases.take(run_id, self.runtime.owner, self.lease_ttl)
        if claim is None:
            raise await self._not_taken(run_id, "resume")
        status, reason = Status.QUEUED, None
        try:
            graph = await self.runtime.load(run_id)
            if graph.finished is not None:
                status, reason = graph.status, graph.reason or None
                raise RunNotResumable(
                    f"run {run_id} has finished ({graph.status}); nothing to resume"
                )
            if budget:
                limits = replace(budget_of(graph.limits), **budget)  # type: ignore[arg-type]
                record = run_resumed(self.runtime.owner, claim.epoch, limits_of(limits))
                await self.runtime.writer.write(graph, record, epoch=claim.epoch)
        finally:
            await self._release(claim, status, reason)
        await self.leases.notify()
        return status

    async def cancel(self, run_id: str) -> Status:
        """Stop a run for good; return its status now (the owner may still be stopping it).

        The flag reaches a worker that owns the run at its next lease renewal (or its claim);
        a run nobody holds is taken here and its RunFinished appended at our epoch.
        """
        status = await self.leases.request_cancel(run_id)
        if status is None:
            raise UnknownRun(run_id)
        if status.finished:
            raise RunNotResumable(f"run {run_id} has finished ({status.value}); cannot cancel")
        if run_id in self.runtime.executing:  # the embedded worker executes it: stop it now
            return (await self.runtime.cancel(run_id)).status
        claim = await self.leases.take(run_id, self.runtime.owner, self.lease_ttl)
        if claim is None:
            info = await self.runtime.store.runs.get(run_id)
            return info.status if info else status
        try:
            outcome = await self.runtime.cancel(run_id, epoch=claim.epoch)
        except RunNotResumable:
            # It finished, but a crash kept its row from saying so: give it back as it is.
            graph = await self.runtime.load(run_id)
            await self._release(claim, graph.status, graph.reason or None)
            raise
        except BaseException:
            await self._release(claim, status, None)
            raise
        return outcome.status  # its RunFinished released the claim

    async def _release(self, claim: Claim, status: Status, reason: str | None) -> None:
        if not await self.leases.release(claim.run_id, claim.epoch, status, reason):
            log.warning("run %s: release at epoch %d was fenced off", claim.run_id, claim.epoch)

    async def _not_taken(self, run_id: str, what: str) -> TetherError:
        info = await self.runtime.store.runs.get(run_id)
        if info is None:
            return UnknownRun(run_id)
        if info.status.finished:
            return RunNotResumable(f"run {run_id} has finished ({info.status}); cannot {what}")
        held = f" by {info.owner}" if info.owner else ""
        return RunBusy(f"run {run_id} is {info.status.value}{held}; nothing to {what} now")

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
