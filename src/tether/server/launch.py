"""How a run the server starts gets executed: the one seam between embedded and distributed.

Embedded (`tether serve` on SQLite, no separate workers): the server process executes
the runs it starts on its own Runtime, in a task set it owns and drains on shutdown.
Distributed (PostgreSQL with `tether worker` processes): the server only records the run
as queued and workers claim it; that launcher plugs in here without touching the routes.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any

from tether.core import Budget
from tether.errors import RunNotResumable, TetherError
from tether.executor import Outcome
from tether.runtime import Runtime
from tether.store.base import Status

log = logging.getLogger("tether.server")

DRAIN = "drain"


class RunBusy(TetherError):
    """The run is executing already, so it cannot be resumed now."""


def budget_of(limits: Any) -> Budget:
    """A Budget holding a run's current limits (a BudgetLimits message)."""
    return Budget(
        max_nodes=limits.max_nodes,
        max_tokens=limits.max_tokens,
        max_cost=limits.max_cost,
        max_wall_s=limits.max_wall_ms / 1000,
        max_turns=limits.max_turns,
    )


class Launcher(ABC):
    """Starts, resumes and cancels runs on behalf of the HTTP API."""

    runtime: Runtime

    @abstractmethod
    async def open(self) -> None:
        """Begin (and take up runs left behind, where this launcher owns execution)."""

    @abstractmethod
    async def start(
        self,
        agent: str,
        input: Any,
        *,
        run_id: str,
        budget: Budget | None,
        config: dict[str, Any] | None = None,
    ) -> None:
        """Record a new run and see that it executes (RunExists if the id is taken)."""

    @abstractmethod
    async def resume(self, run_id: str, *, budget: dict[str, float] | None) -> None:
        """Continue a paused or interrupted run; `budget` replaces the limits it names."""

    @abstractmethod
    async def cancel(self, run_id: str) -> Status:
        """Stop a run for good; return its status now."""

    @abstractmethod
    async def close(self) -> None:
        """Stop: drain what executes here so it pauses, recorded, and can resume."""


class EmbeddedLauncher(Launcher):
    """Executes runs in this process on `runtime`; every task belongs to this launcher."""

    def __init__(self, runtime: Runtime, *, adopt: bool = False) -> None:
        self.runtime = runtime
        # Only a store that no other process executes on (SQLite) can tell a run that
        # died with its process from one that executes elsewhere.
        self.adopt = adopt
        self._tasks: dict[str, asyncio.Task[Outcome]] = {}

    async def open(self) -> None:
        if self.adopt:
            for run_id in await self._left_behind():
                self._spawn(run_id, self.runtime.resume(run_id))

    async def _left_behind(self) -> list[str]:
        """Top-level runs that were executing, or were drained, when a server stopped."""
        found = []
        for status in (Status.RUNNING, Status.PAUSED):
            offset = 0
            while rows := await self.runtime.store.runs.list(
                status=status, limit=500, offset=offset
            ):
                offset += len(rows)
                found += [
                    r.run_id
                    for r in rows
                    if r.parent_run_id is None and (status is Status.RUNNING or r.reason == DRAIN)
                ]
        return found

    async def start(
        self,
        agent: str,
        input: Any,
        *,
        run_id: str,
        budget: Budget | None,
        config: dict[str, Any] | None = None,
    ) -> None:
        graph = await self.runtime.create(
            agent, input, run_id=run_id, budget=budget, config=config, status=Status.RUNNING
        )
        self._spawn(run_id, self.runtime.execute(graph))

    async def resume(self, run_id: str, *, budget: dict[str, float] | None) -> None:
        if run_id in self._tasks:
            raise RunBusy(f"run {run_id} is executing; nothing to resume")
        graph = await self.runtime.load(run_id)
        if graph.finished is not None:
            raise RunNotResumable(f"run {run_id} has finished ({graph.status}); nothing to resume")
        if run_id in self._tasks:  # resumed by a concurrent request while we read its log
            raise RunBusy(f"run {run_id} is executing; nothing to resume")
        limits = replace(budget_of(graph.limits), **budget) if budget else None  # type: ignore[arg-type]
        self._spawn(run_id, self.runtime.continue_graph(graph, budget=limits))

    async def cancel(self, run_id: str) -> Status:
        outcome = await self.runtime.cancel(run_id)
        task = self._tasks.get(run_id)
        if task is not None:
            await asyncio.wait([task])
        return outcome.status

    def _spawn(self, run_id: str, work: Coroutine[Any, Any, Outcome]) -> None:
        task = asyncio.create_task(work, name=f"tether-run-{run_id}")
        self._tasks[run_id] = task
        task.add_done_callback(lambda t: self._done(run_id, t))

    def _done(self, run_id: str, task: asyncio.Task[Outcome]) -> None:
        if self._tasks.get(run_id) is task:
            del self._tasks[run_id]
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("run %s stopped with an error: %r", run_id, exc, exc_info=exc)
        else:
            outcome = task.result()
            log.info("run %s: %s %s", run_id, outcome.status.value, outcome.reason)

    @property
    def executing(self) -> list[str]:
        """Ids of the runs this launcher is executing now."""
        return list(self._tasks)

    async def close(self) -> None:
        self.runtime.drain()
        if self._tasks:
            await asyncio.wait(list(self._tasks.values()))
