"""The retention port of a store: find expired runs, delete runs in bounded batches."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from tether.store.base import RunInfo, Status

FINISHED = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)


@dataclass(frozen=True, slots=True)
class Rows:
    """How many log rows, and how many record bytes."""

    rows: int = 0
    bytes: int = 0

    def __add__(self, other: Rows) -> Rows:
        return Rows(self.rows + other.rows, self.bytes + other.bytes)


class Retention(ABC):
    """What a backend offers retention: facts and bounded deletes; `tether.ops` decides.

    Every delete touches finished runs only, checked in the statement itself, so a run
    that is live (queued, running, paused) is never deleted whatever the caller asks.
    """

    @abstractmethod
    async def expired(
        self,
        before: float,
        *,
        statuses: Sequence[Status] = FINISHED,
        agent: str | None = None,
        after: tuple[float, str] = (0.0, ""),
        limit: int = 100,
    ) -> list[RunInfo]:
        """Top-level runs finished before `before` (by their row's last update), oldest
        first, strictly after the `(updated_at, run_id)` cursor `after`."""

    @abstractmethod
    async def families(self, run_ids: Sequence[str]) -> list[RunInfo]:
        """These runs and every run below them (sub-agent runs, theirs...), parents first."""

    @abstractmethod
    async def log_size(self, run_ids: Sequence[str]) -> Rows:
        """The log rows and record bytes these runs hold."""

    @abstractmethod
    async def delete_log(self, run_ids: Sequence[str], *, limit: int) -> Rows | None:
        """Delete up to `limit` log rows of these (finished) runs in one short transaction,
        last seqs first; return what was deleted (0 rows: nothing left). None, deleting
        nothing, while another run references rows of these (a fork made since they were
        copied out: `ForkTable.detach` them first); the check and the delete are atomic
        against a fork being created (`tether.store.forks`)."""

    @abstractmethod
    async def seal(self, run_ids: Sequence[str]) -> int:
        """Mark these runs as being deleted, those that are finished, in one statement;
        return how many it marked (fewer than asked: one is live, or gone). A marked run
        is never reopened (`Leases.reopen`, a retry): a delete that marked a whole family
        can take it apart without a retry bringing part of it back meanwhile."""

    @abstractmethod
    async def unseal(self, run_ids: Sequence[str]) -> None:
        """Take the mark of `seal` off these runs (a delete that did not go ahead)."""

    @abstractmethod
    async def delete_runs(self, run_ids: Sequence[str]) -> int:
        """Delete the run rows of these runs that are finished; return how many."""

    @abstractmethod
    def exclusive(self, name: str) -> AbstractAsyncContextManager[bool]:
        """An advisory lock named `name` across every process on this store, not waited
        for: the block gets True if this process holds it, False if another one does."""
