"""The lease of runs executed in-process: one batched renewal for all of a runtime's runs.

`Runtime.start` and `Runtime.resume` own their runs as a worker does, with a lease and an
epoch. While a run executes, this heartbeat renews the leases of every run the runtime
holds in one statement every third of the lease, which also says which were asked to be
cancelled through the store (`tether cancel`, the API). A process that dies stops
renewing: once its leases run out, a worker adopts its runs, and `tether resume` takes
them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from tether.foundation.errors import StoreError
from tether.store.base import Claim, Leases

log = logging.getLogger("tether.engine.ownership")

DEFAULT_LEASE_TTL = 5.0


class Heartbeat:
    """Renews the leases a runtime holds for the runs it executes in-process."""

    def __init__(
        self, leases: Leases, owner: str, ttl: float, on_cancel: Callable[[str], object]
    ) -> None:
        if ttl <= 0:
            raise ValueError(f"lease_ttl must be positive, not {ttl}")
        self.leases = leases
        self.owner = owner
        self.ttl = ttl
        self._on_cancel = on_cancel
        self._held: dict[str, Claim] = {}
        self._task: asyncio.Task[None] | None = None
        # Statements sent (one per renewal of all held runs): bench/lease_cost.py reads it.
        self.statements = 0

    @asynccontextmanager
    async def holding(self, claim: Claim) -> AsyncIterator[None]:
        """Keep `claim`'s lease alive while the block runs.

        Left by an exception (the task was cancelled, the run fenced off, the store gone),
        the lease is let go at once (it ends now, at our epoch), so whoever comes next
        does not wait out the TTL; a crashed process lets it run out instead.
        """
        self._held[claim.run_id] = claim
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._beat(), name=f"tether-heartbeat-{self.owner}")
        ok = False
        try:
            yield
            ok = True
        finally:
            self._held.pop(claim.run_id, None)
            if not self._held and self._task is not None:
                task, self._task = self._task, None
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            if not ok:
                await self._let_go(claim)

    async def _let_go(self, claim: Claim) -> None:
        try:
            await self.leases.renew(self.owner, [claim], 0.0)
        except StoreError as exc:  # the lease runs out by itself
            log.warning("run %s: could not let the lease go (%s)", claim.run_id, exc)

    async def _beat(self) -> None:
        while self._held:
            await asyncio.sleep(self.ttl / 3)
            held = list(self._held.values())
            try:
                renewal = await self.leases.renew(self.owner, held, self.ttl)
                self.statements += 1
            except StoreError as exc:
                # The fence refuses this owner's appends once another takes the run over.
                log.warning("%s: lease renewal failed (%s); retrying", self.owner, exc)
                continue
            for run_id in renewal.lost:
                if run_id not in self._held:
                    continue  # it finished (and was released) while the renewal was sent
                log.warning(
                    "run %s: lease lost (taken over at a newer epoch); its next append is "
                    "refused and it stops",
                    run_id,
                )
            for run_id in renewal.cancel:
                self._on_cancel(run_id)
