"""Start, resume, requeue, retry and cancel runs on behalf of every entry point.

The CLI, the HTTP server and in-process callers go through here, so who may execute a run
is decided once: a run is executed only under a lease (`Runtime.start` and
`Runtime.resume` take one and keep it alive; workers claim theirs), a live lease is
refused with `RunBusy` naming the owner and the seconds it has left, and a takeover
(`force`) raises the epoch, which fences the old owner: its next append is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from tether.engine import follow
from tether.engine.executor import Outcome
from tether.engine.follow import Wakeups
from tether.engine.ownership import admissible
from tether.engine.runtime import Runtime
from tether.foundation.core import Budget
from tether.foundation.errors import (
    BudgetSpent,
    CannotContinue,
    RunBusy,
    RunNotResumable,
    RunNotRetryable,
    UnknownRun,
)
from tether.model.budgets import Change, apply_change
from tether.model.graph import Graph
from tether.model.records import limits_of, run_resumed
from tether.store.base import Claim, RunInfo, Status

log = logging.getLogger("tether.control.actions")

# How often `resume(wait=True)` looks again while the owner's lease is live.
WAIT_POLL_S = 0.5


async def resume(
    runtime: Runtime,
    run_id: str,
    *,
    budget: Budget | None = None,
    change: Change | None = None,
    wait: bool = False,
    force: bool = False,
    on_wait: Callable[[RunBusy], None] | None = None,
    graph: Graph | None = None,
    claim: Claim | None = None,
) -> Outcome:
    """Take a run and continue it here: the whole procedure, for every entry point
    (`graph`: the run as the caller loaded it already; `claim`: taken already, with it,
    by `Runtime.take_loading`).

    `budget` replaces the run's limits; `change` (`nodes=+10`) changes them, from the log
    as read. A finished run or a spent budget is refused before anything is executed (the
    run given back as it was). A live owner: RunBusy, or with `wait`, look again until
    its lease has ended (each refusal is passed to `on_wait`), or with `force`, take it
    over at once.
    """
    if graph is None and claim is None:  # read once: a wait below catches up with it
        claim, graph = await runtime.take_loading(run_id, force=force)
    if change is not None and graph is not None:
        budget = apply_change(change, graph)
    if graph is not None and graph.finished is None:
        try:  # said before the run starts (the runtime judges it again, under the lease)
            admissible(graph, budget)
        except BudgetSpent:
            if claim is not None:
                await runtime.give_back(claim, graph)
            raise
    while True:
        try:
            return await runtime.resume(
                run_id, budget=budget, force=force, graph=graph, claim=claim
            )
        except RunBusy as busy:
            claim = None  # (a claim is used once: RunBusy comes of a take of our own)
            if not wait:
                raise
            if on_wait is not None:
                on_wait(busy)
            left = busy.lease_left if busy.lease_left is not None else WAIT_POLL_S
            await asyncio.sleep(min(max(left, 0.05), WAIT_POLL_S))


async def owner_of(runtime: Runtime, run_id: str) -> RunInfo:
    """The run's row (UnknownRun if there is none)."""
    info = await runtime.store.runs.get(run_id)
    if info is None:
        raise UnknownRun(run_id)
    return info


async def requeue(runtime: Runtime, run_id: str, *, budget: Change | None, ttl: float) -> Status:
    """Queue a paused or orphaned run again for the workers; `budget` replaces the limits
    it names (a relative one: that much more than the run used, read under the claim). The
    new limits are recorded (RunResumed) under a claim of our own, so the worker that
    claims the run next rehydrates them from the log like everything else."""
    if run_id in runtime.executing:
        raise RunBusy(f"run {run_id} is executing in this process; nothing to resume")
    async with runtime.keeper.hold(run_id, back=Status.QUEUED, ttl=ttl) as held:
        graph = await runtime.load(run_id)
        new = apply_change(budget, graph) if budget else None
        try:  # finished, or paused by its budget: resuming must raise what ran out
            admissible(graph, new)
        except (RunNotResumable, BudgetSpent):
            held.give_back(graph.status, graph.reason or None)
            raise
        if new is not None:
            record = run_resumed(runtime.owner, held.epoch, limits_of(new))
            await runtime.writer.write(graph, record, epoch=held.epoch)
    await runtime.store.leases.notify()
    return held.status


async def retry(runtime: Runtime, run_id: str, *, ttl: float) -> Status:
    """Reopen a failed run and queue it for the workers; return its status (queued).

    Everything the run recorded stays. Its `RunResumed` with `retry` set is appended after
    the `RunFinished` that failed it, under a claim of our own (a new epoch), so replay
    explains the retry and whoever claims the run next continues it: each node that failed
    runs again as a new attempt, numbered after its last, then the run goes on. A run that
    fails again can be retried again. RunNotRetryable unless the run failed.
    """
    claim, graph = await _reopen(runtime, run_id, ttl)
    try:
        record = run_resumed(runtime.owner, claim.epoch, retry=True)
        await runtime.writer.write(graph, record, epoch=claim.epoch)
    except BaseException:
        await runtime.keeper.release(claim.run_id, claim.epoch, Status.FAILED, graph.reason or None)
        raise
    await runtime.keeper.release(claim.run_id, claim.epoch, Status.QUEUED, None)
    await runtime.store.leases.notify()
    return Status.QUEUED


async def retry_here(runtime: Runtime, run_id: str) -> Outcome:
    """Reopen a failed run (as `retry`) and execute it in this process, under a lease kept
    alive here, until it finishes, fails, pauses or parks. CannotContinue (the run given
    back queued, with why, its retry recorded) if this code cannot execute it."""
    claim, graph = await _reopen(runtime, run_id, runtime.lease_ttl)
    async with runtime.keeper.holding(claim):
        try:
            return await runtime.continue_graph(graph, epoch=claim.epoch, retry=True)
        except CannotContinue:  # given back queued, its retry recorded
            raise
        except BaseException:
            if graph.finished is not None:  # the retry was not recorded: failed as it was
                await runtime.keeper.release(
                    claim.run_id, claim.epoch, Status.FAILED, graph.reason or None
                )
            raise


async def _reopen(runtime: Runtime, run_id: str, ttl: float) -> tuple[Claim, Graph]:
    """Take a failed run to retry it (a new epoch fences anyone else) and read its log."""
    if run_id in runtime.executing:
        raise RunNotRetryable(f"run {run_id} is executing in this process; it has not failed")
    claim = await runtime.keeper.reopen(run_id, ttl=ttl)
    if claim is None:
        info = await owner_of(runtime, run_id)
        if info.parent_run_id is not None:
            raise RunNotRetryable(
                f"run {run_id} is a sub-agent run of {info.parent_run_id}; retry its parent "
                "(its failed sub-agent runs are retried with the nodes that ran them)"
            )
        if info.status is Status.FAILED:  # marked by a delete under way (Retention.seal)
            raise RunNotRetryable(f"run {run_id} is being deleted; it cannot be retried")
        raise RunNotRetryable(
            f"run {run_id} is {info.status.value}, not failed; only a failed run can be retried"
        )
    try:
        graph = await runtime.load(run_id)
        if graph.status is not Status.FAILED:  # (a row always tells its log's end)
            raise RunNotRetryable(
                f"run {run_id}'s log ends {graph.status.value}; only a failed run can be retried"
            )
    except BaseException:
        await runtime.keeper.release(claim.run_id, claim.epoch, Status.FAILED, None)
        raise
    return claim, graph


async def cancel(runtime: Runtime, run_id: str, *, ttl: float) -> Status:
    """Stop a run for good; return its status now (its owner may still be stopping it).

    The flag reaches whoever owns the run at its next lease renewal (a worker, or the
    heartbeat of a process that started it); a run nobody holds is taken here and its
    RunFinished appended at our epoch.
    """
    status = await runtime.store.leases.request_cancel(run_id)
    if status is None:
        raise UnknownRun(run_id)
    if status.finished:
        raise RunNotResumable(f"run {run_id} has finished ({status.value}); cannot cancel")
    if run_id in runtime.executing:  # executing in this process: stop it now
        return (await runtime.cancel(run_id)).status
    claim = await runtime.keeper.take(run_id, ttl=ttl)
    if claim is None:
        info = await runtime.store.runs.get(run_id)
        return info.status if info else status
    try:
        outcome = await runtime.cancel(run_id, epoch=claim.epoch)
    except RunNotResumable:
        # It finished, but a crash kept its row from saying so: give it back as it is.
        graph = await runtime.load(run_id)
        await runtime.keeper.release(run_id, claim.epoch, graph.status, graph.reason or None)
        raise
    except BaseException:
        await runtime.keeper.release(run_id, claim.epoch, status, None)
        raise
    return outcome.status  # its RunFinished released the claim


async def wait_finished(runtime: Runtime, run_id: str, *, within: float) -> Status:
    """The run's status once it finished, or after `within` seconds: woken by its appends
    (this process's, and any process's through the store's listener), not by polling."""
    wakeups = Wakeups()
    unsubscribe = runtime.events.on_record(wakeups.on_record)
    listener = runtime.store.log.listener(wakeups.on_append)
    try:
        if listener is not None:
            await listener.start()
        return await follow.wait_finished(
            runtime.store, run_id, within=within, wakeups=wakeups, poll=0.5
        )
    finally:
        unsubscribe()
        if listener is not None:
            await listener.close()
    wakeups = Wakeups()
    unsubscribe = runtime.events.on_record(wakeups.on_record)
    listener = runtime.store.log.listener(wakeups.on_append)
    try:
        if listener is not None:
            await listener.start()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                async for _ in follow(runtime.store, run_id, wakeups=wakeups, poll=0.5):
                    pass
    finally:
        unsubscribe()
        if listener is not None:
            await listener.close()
    return (await owner_of(runtime, run_id)).status
