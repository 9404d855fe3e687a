"""Who executes a run: one lease keeper for every process that does, worker or not.

A process executes a run only while it holds the run's lease at an epoch. `LeaseKeeper`
renews the leases of every run a process holds in one statement every third of the
lease (`Leases.renew`), which also says which runs were asked to be cancelled through the
store (`tether cancel`, the API). When a lease is lost (another owner took the run over
at a newer epoch: `tether resume --force`, a worker after a partition) or runs out
unrenewed (the store is unreachable), the keeper cancels the task that executes the run
at once: the old owner's handlers stop, so none of its side effects happens after it
learned it lost the run, and whatever it would append is fenced off anyway.

Workers (`tether.control.worker`) keep their claims here; `Runtime.start` and
`Runtime.resume` hold theirs with `holding`, which raises `LeaseLost` when the run was
stopped so. A process that dies stops renewing: once its leases run out, a worker adopts
its runs, and `tether resume` takes them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from tether.foundation import metrics
from tether.foundation.errors import LeaseLost, StoreError
from tether.store.base import Claim, Leases

log = logging.getLogger("tether.engine.ownership")

DEFAULT_LEASE_TTL = 5.0


class LeaseKeeper:
    """Renews the leases one process holds, and stops the runs whose lease it lost."""

    def __init__(
        self,
        leases: Leases,
        owner: str,
        ttl: float,
        *,
        on_cancel: Callable[[str], object],
        on_stop: Callable[[str, str], object] | None = None,
    ) -> None:
        if ttl <= 0:
            raise ValueError(f"lease_ttl must be positive, not {ttl}")
        self.leases = leases
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
            await self.leases.renew(self.owner, [claim], 0.0)
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
                self._stop_expired()
            await self.renew()

    async def renew(self) -> None:
        """Renew the held runs' leases in one statement; pass on cancels; stop lost runs."""
        # Not the runs being stopped: their leases must run out for the next owner.
        held = [c for run_id, c in self._held.items() if run_id in self._renewed]
        if not held:
            return
        sent = time.monotonic()
        # Bounded by the next expiry too: a renewal stuck on a partitioned connection must
        # not keep the keeper from stopping a run the moment its lease runs out.
        expiries = [at + self.ttl for at in self._renewed.values()]
        bound = min([sent + self.ttl / 3, *expiries]) - sent
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
