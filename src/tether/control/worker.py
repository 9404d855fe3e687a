"""The worker: claim runnable runs, execute them under a renewed lease, release them.

One idea: claim -> run -> heartbeat -> release. Every task belongs to one TaskGroup.
`stop()` (what SIGTERM/SIGINT call) only sets events: the claim loop stops claiming, the
executors stop launching nodes and let in-flight ones finish within the grace period,
and each run is released paused for the drain, runnable at once by another worker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import Counter
from collections.abc import Awaitable, Iterable
from typing import Any

from tether.control.routing import Routing
from tether.engine.ownership import DEFAULT_LEASE_TTL, LeaseKeeper
from tether.engine.runtime import Runtime
from tether.foundation import faults, metrics
from tether.foundation.aio import first_of
from tether.foundation.errors import (
    CannotContinue,
    LogGap,
    StaleEpoch,
    StoreError,
    StoreFull,
    StoreUnavailable,
)
from tether.ops.retention import retention_pass
from tether.store.base import Claim, Status
from tether.store.workers import WorkerInfo

log = logging.getLogger("tether.control.worker")

# How often an idle worker looks for expired leases (nothing NOTIFYs when a lease runs out).
DEFAULT_POLL = 1.0
# How long a worker leaves alone a run its code could not continue (it was given back
# queued) before it looks at it again.
DECLINE_FOR = 60.0
# How often a worker with `retain` set tries a retention pass.
DEFAULT_RETAIN_EVERY = 600.0


class Worker:
    """Executes up to `concurrency` runs of a store at once, each under a lease."""

    def __init__(
        self,
        runtime: Runtime,
        *,
        concurrency: int = 16,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        poll: float = DEFAULT_POLL,
        retain: float | None = None,
        retain_every: float = DEFAULT_RETAIN_EVERY,
        agents: Iterable[str] = (),
        schedules: bool = True,
    ) -> None:
        if lease_ttl <= 0 or concurrency <= 0:
            raise ValueError("lease_ttl and concurrency must be positive")
        if (retain is not None and retain <= 0) or retain_every <= 0:
            raise ValueError("retain and retain_every must be positive")
        self.runtime = runtime
        self.leases = runtime.store.leases
        self.owner = runtime.owner
        self.concurrency = concurrency
        self.lease_ttl = lease_ttl
        self.poll = poll
        # Prune runs finished longer ago than this, every `retain_every` seconds.
        self.retain = retain
        self.retain_every = retain_every
        # Fire the store's due schedules (every worker may: each fire time runs once).
        self.schedules = schedules
        self.stopping = asyncio.Event()
        self.counts: Counter[str] = Counter()
        # The leases of the runs it holds, renewed in one statement; a run whose lease is
        # lost or runs out has its task cancelled there (as for in-process runs).
        self.keeper = LeaseKeeper(
            self.leases,
            runtime.store.runs,
            self.owner,
            lease_ttl,
            on_cancel=self._cancel_asked,
            on_stop=self._stopped,
        )
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._slot_freed = asyncio.Event()
        # Runs given back because this worker's code cannot continue them, and when.
        self._declined: dict[str, float] = {}
        # The agents and versions this worker serves (`agents`: resolved now; the others
        # as their runs show up), advertised with its heartbeat.
        self.routing = Routing(runtime, agents)
        self._started_at = time.time()

    def stop(self) -> None:
        """Drain: stop claiming and launching nodes. A second call cancels what is in flight."""
        self.stopping.set()
        self.runtime.drain()

    def _count(self, what: str, n: int = 1) -> None:
        self.counts[what] += n
        if (m := metrics.active) is not None:
            m.worker_event(what, n)

    def _about(self, claim: Claim) -> dict[str, object]:
        """The fields a structured log line about a held run carries."""
        return {"run_id": claim.run_id, "epoch": claim.epoch, "owner": self.owner}

    def statistics(self) -> dict[str, int]:
        """Counters: claimed, finished, paused, drained, declined, fenced, lost, expired,
        failed."""
        return dict(self.counts)

    async def run(self) -> None:
        """Work until stop(); return once every held run is released (or was fenced off)."""
        await self._advertise()  # listed by `tether workers` before it claims anything
        async with asyncio.TaskGroup() as tg:
            beat = tg.create_task(self.keeper.run())
            advert = tg.create_task(self._advertising())
            retain = tg.create_task(self._retain()) if self.retain is not None else None
            fire = tg.create_task(self._fire_schedules()) if self.schedules else None
            await self._claim_loop(tg)
            log.info("%s: draining %d runs", self.owner, len(self._tasks))
            while self._tasks:
                await asyncio.wait(list(self._tasks.values()))
            beat.cancel()
            advert.cancel()
            for task in (retain, fire):
                if task is not None:
                    task.cancel()
        try:
            await self.runtime.store.workers.leave(self.owner)
        except StoreError as exc:  # its row ages out after its TTL
            log.warning("%s: could not remove its workers row (%s)", self.owner, exc)
        log.info("%s: stopped %s", self.owner, self.statistics())

    async def _retain(self) -> None:
        # Replicas take turns through the store's advisory lock; one that finds it taken
        # tries again next time. A store error only costs this pass.
        assert self.retain is not None
        while not self.stopping.is_set():
            try:
                report = await retention_pass(self.runtime.store, older_than=self.retain)
            except StoreError as exc:
                log.warning(
                    "%s: retention pass failed (%s); next in %.0fs",
                    self.owner,
                    exc,
                    self.retain_every,
                )
            else:
                if report is None:
                    log.info("%s: retention: another worker holds the lock", self.owner)
                else:
                    self._count("retention_passes")
                    self._count("pruned", report.runs)
                    log.info(
                        "%s: retention pruned %d runs (+%d sub-agent runs, %d log rows) in %.2fs",
                        self.owner,
                        report.runs,
                        report.child_runs,
                        report.rows,
                        report.seconds,
                    )
            await self._until_stopped(asyncio.sleep(self.retain_every))

    async def _fire_schedules(self) -> None:
        # Sleeps until the next fire time, or `poll` at most (a schedule added meanwhile).
        schedules = self.runtime.schedules
        while not self.stopping.is_set():
            due_in: float | None = None
            try:
                queued, due_in = await schedules.fire_due()
            except StoreError as exc:
                log.warning("%s: firing schedules failed (%s)", self.owner, exc)
            else:
                if queued:
                    self._count("scheduled", len(queued))
            wait = self.poll if due_in is None else min(self.poll, max(0.005, due_in))
            await self._until_stopped(asyncio.sleep(wait))

    # -- claiming ----------------------------------------------------------------

    async def _claim_loop(self, tg: asyncio.TaskGroup) -> None:
        delay = 0.05
        while not self.stopping.is_set():
            free = self.concurrency - self.keeper.held
            claims: list[Claim] = []
            more = False
            if free > 0:
                sent = time.monotonic()
                skip = self._skipped(sent)
                try:
                    claims = await self.keeper.claim(free, skip=skip, serves=self.routing.serves())
                    delay = 0.05
                    # Fewer than it could take: look at the runs its versions leave out
                    # (agents not resolved yet, runs of versions its code may continue).
                    more = len(claims) < free and await self.routing.scan(skip, free)
                    if self.routing.changed:  # serves another agent: say so now
                        self.routing.changed = False
                        await self._advertise()
                except StoreUnavailable as exc:
                    log.warning("%s: claim failed (%s); retrying in %.2fs", self.owner, exc, delay)
                    await self._until_stopped(asyncio.sleep(delay))
                    delay = min(delay * 2, 2.0)
                    continue
            for claim in claims:
                faults.hit("after_claim")
                log.info(
                    "run %s: claimed at epoch %d",
                    claim.run_id,
                    claim.epoch,
                    extra=self._about(claim),
                )
                self._count("claimed")
                task = tg.create_task(self._execute(claim))
                # The lease was taken before the claim was sent: it runs out no sooner than
                # that plus the TTL, so a stop then never overlaps another owner's claim.
                self.keeper.keep(claim, task, since=sent)
                self._tasks[claim.run_id] = task
            if free > 0 and len(claims) < free and more:
                continue  # claim the runs just found continuable at once
            if free > 0 and len(claims) < free:
                await self._until_stopped(self.leases.wait_for_work(await self._idle_wait()))
            else:
                self._slot_freed.clear()
                await self._until_stopped(self._slot_freed.wait())

    def _skipped(self, now: float) -> list[str]:
        """The runs this worker gave back as beyond its code, until DECLINE_FOR passes."""
        for run_id, at in list(self._declined.items()):
            if now - at >= DECLINE_FOR:
                del self._declined[run_id]
        return list(self._declined)

    async def _idle_wait(self) -> float:
        """How long an idle worker waits for a NOTIFY: its poll, or less when a parked run's
        deadline comes sooner (timers are not polled for; they are waited for)."""
        try:
            due_in = await self.leases.next_wake()
        except StoreUnavailable:
            return self.poll
        if due_in is None:
            return self.poll
        # Not zero when due: a due run another worker is claiming right now is locked.
        return min(self.poll, max(0.005, due_in))

    async def _until_stopped(self, aw: Awaitable[Any]) -> None:
        """Await `aw`, or stop waiting as soon as a drain begins."""
        await first_of(aw, self.stopping.wait())

    # -- one run -----------------------------------------------------------------

    async def _execute(self, claim: Claim) -> None:
        try:
            await self._execute_and_release(claim)
        finally:  # also when cancelled (a lost lease): the run is no longer ours
            self.keeper.forget(claim.run_id)
            self._tasks.pop(claim.run_id, None)
            self._slot_freed.set()

    async def _execute_and_release(self, claim: Claim) -> None:
        run_id, epoch = claim.run_id, claim.epoch
        try:
            graph = await self.runtime.load(run_id)
            if graph.finished is not None:
                # Its last record landed but the row was not updated (a log written before
                # the finish and the release became one transaction).
                await self._release(claim, graph.status, graph.reason or None)
                return
            if not self.routing.dynamic and graph.agent not in self.routing.agents:
                # Pinned, and its first record names an agent not served here (whatever its
                # row says): never resolved, never executed; given back queued.
                why = f"its run_started record names agent {graph.agent!r}, not served here"
                log.warning("run %s: %s; gave it back", run_id, why)
                self._declined[run_id] = time.monotonic()
                self._count("declined")
                await self._release(claim, Status.QUEUED, why)
                return
            if claim.cancel:
                # Asked to cancel while nobody held it: record that, execute nothing.
                outcome = await self.runtime.cancel(run_id, epoch=epoch)
            else:
                outcome = await self.runtime.continue_graph(graph, epoch=epoch)
            # The run's last record released it, in the same transaction.
            self._released(claim, outcome.status, outcome.reason or None)
        except CannotContinue as exc:
            # Given back queued (nothing recorded): a worker whose code can takes it.
            log.warning("%s; gave it back for a worker that can continue it", exc)
            self._declined[run_id] = time.monotonic()
            self._count("declined")
        except StaleEpoch:
            log.warning(
                "run %s: fenced off, epoch %d is stale (another worker claimed the run); "
                "stopped working on it",
                run_id,
                epoch,
            )
            self._count("fenced")
        except LogGap as exc:
            # Its log kept refusing appends after reloads: give it back for a fresh take-up.
            log.error("run %s: %s; giving it back queued", run_id, exc)
            await self._release(claim, Status.QUEUED, f"reload after a lost log tail: {exc}")
        except StoreFull as exc:
            # Not even its RunResumed fitted: given back paused, with why (not failed: a
            # `tether resume` finishes it once space is freed).
            log.error("run %s: %s; left paused", run_id, exc)
            self._count("paused")
        except StoreUnavailable as exc:
            # The lease runs out and another worker (or this one) takes the run up again.
            log.error("run %s: store unavailable (%s); leaving it to its lease", run_id, exc)
            self._count("abandoned")
        except Exception as exc:
            log.exception("run %s: execution failed", run_id)
            await self._release(claim, Status.FAILED, f"worker error: {type(exc).__name__}: {exc}")

    async def _release(self, claim: Claim, status: Status, reason: str | None) -> None:
        faults.hit("before_release")
        delay, give_up = 0.05, time.monotonic() + self.runtime.store_retry_s
        while True:
            try:
                released = await self.keeper.release(claim.run_id, claim.epoch, status, reason)
                break
            except StoreUnavailable as exc:
                if time.monotonic() > give_up:
                    log.error(
                        "run %s: release failed (%s); leaving it to its lease", claim.run_id, exc
                    )
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        if not released:  # (the keeper said so in the log)
            self._count("fenced")
            return
        self._released(claim, status, reason)

    def _released(self, claim: Claim, status: Status, reason: str | None) -> None:
        drained = status is Status.PAUSED and self.runtime.draining.is_set()
        kind = "drained" if drained else status.value
        self._count(kind)
        log.info(
            "run %s: released %s%s",
            claim.run_id,
            status.value,
            f" ({reason})" * bool(reason),
            extra=self._about(claim),
        )

    # -- leases ------------------------------------------------------------------

    async def _advertising(self) -> None:
        # Its own task: a slow workers-table write must never delay a lease renewal.
        while True:
            await asyncio.sleep(self.lease_ttl / 3)
            await self._advertise()

    async def _advertise(self) -> None:
        """Refresh this worker's row: the versions it serves and the runs it holds."""
        info = WorkerInfo(
            self.owner,
            socket.gethostname(),
            os.getpid(),
            self._started_at,
            ttl=self.lease_ttl,
            versions=self.routing.advert(),
            runs_held=self.keeper.held,
        )
        try:
            await self.runtime.store.workers.beat(info)
        except StoreError as exc:
            log.warning("%s: could not advertise in the workers table (%s)", self.owner, exc)

    def _cancel_asked(self, run_id: str) -> None:
        # The executor records CANCELLED at our epoch and the run is released so.
        # Not executing yet (between claim and resume): the next beat asks again.
        executor = self.runtime.executing.get(run_id)
        if executor is not None and not executor.cancelling:
            log.info("run %s: cancel requested; stopping it", run_id)
            self.runtime.request_cancel(run_id)

    def _stopped(self, run_id: str, why: str) -> None:
        """The keeper stopped a run: its lease was lost, or expired unrenewed."""
        self._count(why)
