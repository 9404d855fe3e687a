"""Deploying new code while runs are in flight: which runs the code here could not continue
(`tether deploy check`), moving a run to another version (`tether runs upgrade`), and why a
queued run waits (no live worker serves its version)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from tether.engine.continuity import Problem, check_run
from tether.engine.executor import wake_at_of
from tether.engine.registry import Registry, resolve_agent
from tether.engine.runtime import Runtime
from tether.foundation.errors import RunNotResumable, TetherError, UnknownAgent
from tether.model.graph import Graph
from tether.model.records import run_resumed
from tether.store.base import RunInfo, Status, Store
from tether.store.workers import WorkerInfo

# The statuses of runs still in flight: a deploy must not strand them.
IN_FLIGHT = (Status.RUNNING, Status.PAUSED, Status.WAITING, Status.QUEUED)


class CannotUpgrade(TetherError):
    """The code here cannot take a run to the version asked: nothing was changed."""


@dataclass(frozen=True, slots=True)
class Checked:
    """One in-flight run `deploy check` looked at, and its problems (empty: fine)."""

    info: RunInfo
    version: str | None
    problems: list[Problem]


async def deploy_check(runtime: Runtime, agent: str, *, page: int = 500) -> list[Checked]:
    """Every in-flight run of `agent` (and the sub-agent runs under them), checked against
    the agent code in this process: what a new release would strand."""
    registry = resolve_agent(agent)
    checked: list[Checked] = []
    parents: set[str] = set()
    for status in IN_FLIGHT:
        offset = 0
        while rows := await runtime.store.runs.list(status=status, limit=page, offset=offset):
            offset += len(rows)
            for info in rows:
                mine = _same_agent(info.agent, agent, registry)
                if not mine and info.parent_run_id is None:
                    continue
                if not mine and info.run_id.split(".", 1)[0] not in parents:
                    continue  # a sub-agent run under another agent's run
                if info.parent_run_id is None:
                    parents.add(info.run_id)
                graph = await runtime.load(info.run_id)
                code = registry if mine else None  # a sub-agent run: its own agent's code
                problems = await check_run(code, graph, codec=runtime.new_codec())
                checked.append(Checked(info, graph.agent_version or None, problems))
    return checked


def _same_agent(name: str, asked: str, registry: Registry) -> bool:
    if name == asked:
        return True
    try:
        return resolve_agent(name) is registry
    except UnknownAgent:
        return False


async def upgrade(runtime: Runtime, run_id: str, to: str, *, ttl: float) -> Status:
    """Move a run to version `to` of its agent's code, which must be the code here: it must
    have a handler for every pending kind and every pending input must fit. Recorded as a
    RunResumed naming the version; the run keeps its status (a worker of `to` takes it).

    Checked before the run is taken (a refusal moves nothing, not even its epoch), and again
    once it is held, against the log as it is then.
    """
    await _check_upgrade(runtime, await runtime.load(run_id), to)
    # Given back as it was: runnable until its log is read, then as the log says.
    async with runtime.keeper.hold(run_id, back=Status.QUEUED, ttl=ttl, what="upgrade") as held:
        graph = await runtime.load(run_id)
        held.give_back(*_as_it_was(graph))  # before the move is applied to it
        await _check_upgrade(runtime, graph, to)
        if graph.agent_version != to:
            record = run_resumed(runtime.owner, held.epoch, version=to)
            await runtime.writer.resume(graph, record, epoch=held.epoch, version=to)
    await runtime.store.leases.notify()
    return held.status


async def _check_upgrade(runtime: Runtime, graph: Graph, to: str) -> None:
    run_id = graph.run_id
    if graph.finished is not None:
        raise RunNotResumable(f"run {run_id} has finished ({graph.status}); nothing to upgrade")
    registry = resolve_agent(graph.agent)
    if registry.version != to:
        raise CannotUpgrade(
            f"run {run_id}: agent {graph.agent!r} here is version {registry.version}, not "
            f"{to}; upgrade with the code of version {to}"
        )
    problems = await check_run(registry, graph, codec=runtime.new_codec(), version=False)
    if problems:
        details = "; ".join(p.detail for p in problems)
        raise CannotUpgrade(f"run {run_id}: version {to} cannot continue it: {details}")


def _as_it_was(graph: Graph | None) -> tuple[Status, str | None, float | None]:
    """The status a run taken only to be looked at (or moved) is given back with."""
    if graph is None:  # its log did not load: runnable, as a worker would find it
        return Status.QUEUED, None, None
    if graph.finished is not None:
        return graph.status, graph.reason or None, None
    if graph.status is Status.WAITING:
        return Status.WAITING, graph.reason or None, wake_at_of(graph)
    if graph.status is Status.PAUSED and graph.reason != "drain":
        return Status.PAUSED, graph.reason or None, None
    return Status.QUEUED, None, None


def waiting_for(info: RunInfo, live: Sequence[WorkerInfo]) -> str | None:
    """`waiting for a worker of version X` when a runnable run's version is served (or
    declared compatible) by no live worker; None otherwise."""
    version = info.agent_version
    if version is None or info.parent_run_id is not None:
        return None
    if info.status is not Status.QUEUED and not (
        info.status is Status.PAUSED and info.reason == "drain"
    ):
        return None
    for worker in live:
        served = worker.versions.get(info.agent)
        if served is not None and served.covers(version):
            return None
    return f"waiting for a worker of version {version}"


async def waiting_reasons(store: Store, rows: Sequence[RunInfo]) -> dict[str, str]:
    """Why each runnable row that waits does, by run id: a concurrency limit at its slots
    (`waiting: key A at its limit 2`, `ConcurrencyLimits.waiting`) and/or `waiting_for` a
    worker of its version (one read of the workers table)."""
    if not any(r.status in (Status.QUEUED, Status.PAUSED) for r in rows):
        return {}
    live = await store.workers.live()
    reasons = await store.limits.waiting(rows)
    for r in rows:
        if (why := waiting_for(r, live)) is not None:
            reasons[r.run_id] = f"{reasons[r.run_id]}; {why}" if r.run_id in reasons else why
    return reasons


async def with_waiting(store: Store, rows: list[RunInfo]) -> list[RunInfo]:
    """The rows with why each runnable one waits as its reason (`waiting_reasons`)."""
    waiting = await waiting_reasons(store, rows)
    return [replace(r, reason=r.reason or waiting[r.run_id]) if r.run_id in waiting else r
            for r in rows]  # fmt: skip
