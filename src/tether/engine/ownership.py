"""Who executes a run: one lease keeper for every process that does, worker or not.

A process executes a run only while it holds the run's lease at an epoch. `LeaseKeeper`
renews the leases of every run a process holds in one statement every third of the
lease (`Leases.renew`), which also says which runs were asked to be cancelled through the
store (`tether cancel`, the API). When a lease is lost (another owner took the run over
at a newer epoch: `tether resume --force`, a worker after a partition) or runs out
unrenewed (the store is unreachable), the keeper cancels the task that executes the run
at once: the old owner's handlers stop, so none of its side effects happens after it
learned it lost the run, and whatever it would append is fenced off anyway.

Every lease is taken, claimed and given back here (`take`, `claim`, `release`, `hold`),
the last record's release excepted (`RecordWriter.finish` appends it with the release in
one transaction). `admissible` is the one answer to "may this run continue". Workers
(`tether.control.worker`) keep their claims here; `Runtime.start` and `Runtime.resume`
hold theirs with `holding`, which raises `LeaseLost` when the run was stopped so. A
process that dies stops renewing: once its leases run out, a worker adopts its runs, and
`tether resume` takes them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from tether.foundation import metrics
from tether.foundation.core import Budget
from tether.foundation.errors import (
    LeaseLost,
    RunBusy,
    RunNotResumable,
    StoreError,
    TetherError,
    UnknownRun,
)
from tether.model.budgets import refuse_spent
from tether.model.graph import Graph
from tether.model.records import limits_of
from tether.store.base import Claim, Leases, RunTable, Serves, Status

log = logging.getLogger("tether.engine.ownership")

DEFAULT_LEASE_TTL = 5.0
# How long a renewal sent past a lease's expiry may take before the run is stopped.
EXPIRED_RENEWAL_S = 2.0


def admissible(graph: Graph, budget: Budget | None = None) -> None:
    """Raise why a run may not continue, else nothing: RunNotResumable if it finished,
    BudgetSpent if its budget (or `budget`, replacing it) is spent."""
    if graph.finished is not None:
        raise RunNotResumable(
            f"run {graph.run_id} has finished ({graph.status}); nothing to resume"
        )
    refuse_spent(graph, limits_of(budget) if budget is not None else graph.limits)


@dataclass(slots=True)
class Held:
    """A run held by `LeaseKeeper.hold`, and how it is given back when the block ends."""

    claim: Claim
    status: Status
    reason: str | None = None
    wake_at: float | None = None

    @property
    def epoch(self) -> int:
        return self.claim.epoch

    def give_back(
        self, status: Status, reason: str | None = None, wake_at: float | None = None
    ) -> None:
        """Release the run with this status when the block ends."""
        self.status, self.reason, self.wake_at = status, reason, wake_at


class LeaseKeeper:
    """Renews the leases one process holds, and stops the runs whose lease it lost."""

    def __init__(
        self,
        leases: Leases,
        runs: RunTable,
        owner: str,
        ttl: float,
        *,
        on_cancel: Callable[[str], object],
        on_stop: Callable[[str, str], object] | None = None,
    ) -> None:
        if ttl <= 0:
            raise ValueError(f"lease_ttl must be positive, not {ttl}")
        self.leases = leases
        self.runs = runs
        self.owner = owner
        self.ttl = ttl
        self._on_cancel = on_cancel  # a cancel asked through the store
        self._on_stop = on_stop  # (run id, "lost" | "expired") once a run is stopped
        self._held: dict[str, Claim] = {}
        self._tasks: dict[str, asyncio.Task[object]] = {}
        # When each held run's lease was last renewed (monotonic, at the renewal's send):
        # a run not here is held but no longer renewed (being stopped, or given back).
        self._renewed: dict[str, float] = {}
        # Why each stopped run was stopped, until its holder has seen it.
        self._stopped: dict[str, str] = {}
        self._task: asyncio.Task[None] | None = None
        # Statements sent (one per renewal of all held runs): bench/lease_cost.py reads it.
        self.statements = 0

    # -- taking and giving back ------------------------------------------------

    async def take(
        self, run_id: str, *, ttl: float | None = None, force: bool = False
    ) -> Claim | None:
        """Take one top-level run at a new epoch; None if held (unless `force`), finished,
        a sub-agent run or unknown (`not_taken` says which)."""
        return await self.leases.take(run_id, self.owner, ttl or self.ttl, force=force)

    async def reopen(self, run_id: str, *, ttl: float | None = None) -> Claim | None:
        """Take a failed run to retry it, at a new epoch; None if it did not fail."""
        return await self.leases.reopen(run_id, self.owner, ttl or self.ttl)

    async def claim(
        self, limit: int, *, skip: Sequence[str] = (), serves: Serves | None = None
    ) -> list[Claim]:
        """Claim up to `limit` runnable runs (a worker's claim)."""
        return await self.leases.claim(self.owner, limit, self.ttl, skip=skip, serves=serves)

    async def release(
        self,
        run_id: str,
        epoch: int | None,
        status: Status,
        reason: str | None = None,
        *,
        wake_at: float | None = None,
    ) -> bool:
        """Give a run back with `status`; False if fenced off (another epoch holds it)."""
        released = await self.leases.release(run_id, epoch, status, reason, wake_at=wake_at)
        if not released:
            log.warning("run %s: release at epoch %s was fenced off", run_id, epoch)
        return released

    @asynccontextmanager
    async def hold(
        self,
        run_id: str,
        *,
        back: Status,
        reason: str | None = None,
        ttl: float | None = None,
        force: bool = False,
        what: str = "resume",
    ) -> AsyncIterator[Held]:
        """Take a run for the block and give it back on every path, errors included,
        with `back` (and `reason`) unless the block says otherwise (`Held.give_back`).
        Raises what `not_taken` says if the run is not to be had."""
        claim = await self.take(run_id, ttl=ttl, force=force)
        if claim is None:
            raise await self.not_taken(run_id, what)
        held = Held(claim, back, reason)
        try:
            yield held
        finally:
            await self.release(run_id, claim.epoch, held.status, held.reason, wake_at=held.wake_at)

    async def not_taken(self, run_id: str, what: str) -> TetherError:
        """Why a run could not be taken: UnknownRun, RunNotResumable or RunBusy."""
        info = await self.runs.get(run_id)
        if info is None:
            return UnknownRun(run_id)
        if info.status.finished:
            return RunNotResumable(f"run {run_id} has finished ({info.status}); cannot {what}")
        if info.parent_run_id is not None:
            return RunNotResumable(
                f"run {run_id} is a sub-agent run of {info.parent_run_id}; {what} its parent"
            )
        left = None
        if info.lease_until is not None:
            left = info.lease_until - await self.runs.clock()
        held = f" by {info.owner}" if info.owner else ""
        lease = "" if left is None else f", lease {max(left, 0.0):.1f}s left"
        return RunBusy(
            f"run {run_id} is {info.status.value}{held}{lease}; nothing to {what} now",
            run_id=run_id,
            owner=info.owner,
            lease_left=left,
        )

    # -- keeping ---------------------------------------------------------------

    @property
    def held(self) -> int:
        """How many runs this keeper holds."""
        return len(self._held)

    def keep(self, claim: Claim, task: asyncio.Task[object], *, since: float | None = None) -> None:
        """Renew `claim` from now on (its lease taken at `since`, monotonic); `task`
        executes the run and is cancelled if the lease is lost."""
        self._held[claim.run_id] = claim
        self._tasks[claim.run_id] = task
        self._renewed[claim.run_id] = time.monotonic() if since is None else since

    def forget(self, run_id: str) -> str | None:
        """Stop renewing a run (finished, released, given back); why it was stopped, if
        the keeper stopped it."""
        self._held.pop(run_id, None)
        self._tasks.pop(run_id, None)
        self._renewed.pop(run_id, None)
        return self._stopped.pop(run_id, None)

    def stopped(self, run_id: str) -> str | None:
        """Why the keeper stopped a run it holds ("lost", "expired"), else None."""
        return self._stopped.get(run_id)

    @asynccontextmanager
    async def holding(self, claim: Claim) -> AsyncIterator[None]:
        """Keep `claim`'s lease alive while the block runs, in the current task.

        If the lease is lost or runs out meanwhile, the task is cancelled and the block
        ends with `LeaseLost`. Left by another exception (the task was cancelled, the
        store gone), the lease is let go at once (it ends now, at our epoch), so whoever
        comes next does not wait out the TTL; a crashed process lets it run out instead.
        """
        task = asyncio.current_task()
        assert task is not None, "holding() runs in a task"
        self.keep(claim, task)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self.run(), name=f"tether-leases-{self.owner}")
        ok = False
        why: str | None = None
        try:
            yield
            ok = True
        except asyncio.CancelledError:
            why = self._stopped.get(claim.run_id)
            if why is not None and task.uncancel() == 0:
                raise LeaseLost(claim.run_id, claim.epoch, why) from None
            raise
        finally:
            why = self.forget(claim.run_id) or why
            if ok and why is not None:
                task.uncancel()  # the block ended by itself before the cancel reached it
            if not self._held and self._task is not None:
                beat, self._task = self._task, None
                beat.cancel()
                await asyncio.gather(beat, return_exceptions=True)
            if not ok and why is None:
                await self._let_go(claim)

    async def _let_go(self, claim: Claim) -> None:
        try:
            # Ended a second ago, not "now": a take is judged by `lease_until < now`, and a
            # store clock of millisecond resolution (SQLite) reads the same now for both.
            await self.leases.renew(self.owner, [claim], -1.0)
        except StoreError as exc:  # the lease runs out by itself
            log.warning("run %s: could not let the lease go (%s)", claim.run_id, exc)

    async def run(self) -> None:
        """Renew every third of the lease, and stop a run the moment its lease runs out
        unrenewed; until cancelled (a worker's task group), or while runs are held."""
        # Independent of node boundaries: a model call may take minutes, the lease must not.
        while True:
            beat_at = time.monotonic() + self.ttl / 3
            while (now := time.monotonic()) < beat_at:
                expiries = [at + self.ttl for at in self._renewed.values()]
                await asyncio.sleep(max(0.0, min([beat_at, *expiries]) - now))
                if any(time.monotonic() >= at for at in expiries):
                    # A lease ran out while this loop slept (the event loop was held up,
                    # or the last renewal failed at once): the renewal says whether the
                    # run was taken meanwhile; one that does not land stops it.
                    break
            await self.renew()

    async def renew(self) -> None:
        """Renew the held runs' leases in one statement; pass on cancels; stop lost runs."""
        # Not the runs being stopped: their leases must run out for the next owner.
        held = [c for run_id, c in self._held.items() if run_id in self._renewed]
        if not held:
            return
        sent = time.monotonic()
        # Bounded by the next expiry: a renewal stuck on a partitioned connection must not
        # keep the keeper from stopping a run the moment its lease runs out, and a slow one
        # (a loaded store) has until then to land.
        bound = min(at + self.ttl for at in self._renewed.values()) - sent
        if bound <= 0:
            # Past an expiry already (this loop was held up, not the store cut off: a cut
            # renewal times out at the expiry, above): one try, given the time a loaded
            # host needs for a round trip, then the run stops unless it renewed.
            bound = max(self.ttl / 3, EXPIRED_RENEWAL_S)
        try:
            async with asyncio.timeout(max(0.0, bound)):
                renewal = await self.leases.renew(self.owner, held, self.ttl)
            self.statements += 1
        except (StoreError, TimeoutError) as exc:
            log.warning(
                "%s: lease renewal failed (%s); retrying", self.owner, str(exc) or "timed out"
            )
            self._stop_expired()
            return
        lost = set(renewal.lost)
        for claim in held:
            run_id = claim.run_id
            if self._held.get(run_id) == claim and run_id in self._renewed and run_id not in lost:
                self._renewed[run_id] = sent
                if (m := metrics.active) is not None:
                    m.lease_renewals.inc()
        for run_id in renewal.cancel:
            self._on_cancel(run_id)
        for claim in held:
            if claim.run_id in lost and self._held.get(claim.run_id) == claim:
                log.warning(
                    "run %s: lease lost (epoch %d moved on); stopping work on it",
                    claim.run_id,
                    claim.epoch,
                )
                self._stop(claim.run_id, "lost")

    def _stop_expired(self) -> None:
        """Stop the runs whose leases ran out unrenewed (the store was unreachable).

        Another owner may take them from now on; the fence would refuse this process's
        appends anyway, but stopping here also stops its handlers' side effects.
        """
        now = time.monotonic()
        for run_id, at in list(self._renewed.items()):
            if now - at >= self.ttl:
                log.warning(
                    "run %s: lease expired (not renewed for %.1fs: the store is "
                    "unreachable); stopping work on it",
                    run_id,
                    now - at,
                )
                self._stop(run_id, "expired")

    def _stop(self, run_id: str, why: str) -> None:
        self._renewed.pop(run_id, None)
        self._stopped[run_id] = why
        task = self._tasks.get(run_id)
        if task is not None:
            task.cancel()
        if self._on_stop is not None:
            self._on_stop(run_id, why)
