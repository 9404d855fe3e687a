"""Group commit on PostgreSQL: appends of many runs share one INSERT while others are in flight.

An append goes out alone, at once, whenever fewer than `statements` appends are in flight
(so a lone run never waits for a batch that will not come; `statements=0`: always).
Otherwise it queues; when a statement finishes, everything queued (one append per run, up
to `max_rows` rows) leaves as one `append_group` statement, led by the first waiter, and
each waiter learns whether all its rows landed there. A run the shared statement could not
decide for (fenced off, its runs row locked, or any taken seq in the statement) appends
alone, and the caller judges a short count (retry, conflict, fence) for its run alone,
exactly as after a lone append.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import asyncpg

from tether.store.postgres_lanes import AppendLanes
from tether.store.queries import load_queries

Q = load_queries("postgres")

# Appends in flight before the next one queues for a shared statement. Two keeps the
# server's commit path busy (one statement committing while the next is sent) without
# splitting a burst of appends into many small statements.
DEFAULT_STATEMENTS = 2
DEFAULT_MAX_ROWS = 4096

# What a waiter is handed: its run's inserted rows, ALONE (append by yourself: the shared
# statement could not decide for every run), or the batch it now leads.
ALONE = -1


# One run's append on its own statement: (run_id, seqs, records, epoch) -> rows inserted.
Alone = Callable[[str, list[int], list[bytes], int | None], Awaitable[int]]


class _Waiter:
    """A queued append (a plain class: a dataclass's default factory cost a call a waiter)."""

    __slots__ = ("done", "epoch", "records", "run_id", "seqs")

    def __init__(
        self,
        run_id: str,
        seqs: list[int],
        records: list[bytes],
        epoch: int | None,
        done: asyncio.Future[int | list[_Waiter]],
    ) -> None:
        self.run_id = run_id
        self.seqs = seqs
        self.records = records
        self.epoch = epoch
        self.done = done


class GroupCommit:
    """Counts the appends in flight and turns the queued ones into shared statements."""

    def __init__(
        self,
        lanes: AppendLanes,
        alone: Alone,
        *,
        statements: int = DEFAULT_STATEMENTS,
        max_rows: int = DEFAULT_MAX_ROWS,
    ) -> None:
        self._lanes = lanes
        self._alone = alone
        self.statements = statements
        self.max_rows = max_rows
        self.inflight = 0
        self._queue: list[_Waiter] = []
        # Counters for statistics(): shared statements sent, the appends they carried, and
        # those of them that the statement could not decide for, which then went alone.
        self._groups = 0
        self._grouped = 0
        self._undecided = 0

    def statistics(self) -> dict[str, int]:
        return {
            "group_statements": self._groups,
            "grouped_appends": self._grouped,
            "undecided_appends": self._undecided,
        }

    async def append(
        self,
        run_id: str,
        seqs: list[int],
        records: list[bytes],
        epoch: int | None,
    ) -> int:
        """Rows of this append inserted, alone (`alone` given at construction, with these
        arguments) or by a shared statement."""
        if self.inflight < self.statements or self.statements == 0:
            self.inflight += 1
            try:
                return await self._alone(run_id, seqs, records, epoch)
            finally:
                self._release()
        done: asyncio.Future[int | list[_Waiter]] = asyncio.get_running_loop().create_future()
        waiter = _Waiter(run_id, seqs, records, epoch, done)
        self._queue.append(waiter)
        try:
            got = await waiter.done
        except asyncio.CancelledError:
            if waiter.done.done() and not waiter.done.cancelled():
                self._abdicate(waiter.done.result())
            raise
        if isinstance(got, list):
            try:
                got = await self._lead(got)
            finally:
                self._release()
        if got == ALONE:
            self._undecided += 1
            self.inflight += 1
            try:
                return await self._alone(run_id, seqs, records, epoch)
            finally:
                self._release()
        return got

    def _abdicate(self, got: int | list[_Waiter]) -> None:
        """A waiter cancelled after it was made leader: the others append alone."""
        if isinstance(got, list):
            for w in got[1:]:
                if not w.done.done():
                    w.done.set_result(ALONE)
            self._release()

    def _release(self) -> None:
        """One statement less in flight: hand what queued meanwhile to a new leader."""
        self.inflight -= 1
        queue = self._queue
        while queue and self.inflight < self.statements:
            batch: list[_Waiter] = []
            runs: set[str] = set()
            rows = 0
            taken = 0
            for w in queue:
                if w.done.done():  # cancelled while queued
                    taken += 1
                    continue
                if w.run_id in runs or (batch and rows + len(w.seqs) > self.max_rows):
                    break  # a run's second append waits for the next statement
                batch.append(w)
                runs.add(w.run_id)
                rows += len(w.seqs)
                taken += 1
            del queue[:taken]
            if batch:
                self.inflight += 1
                batch[0].done.set_result(batch)

    async def _lead(self, batch: list[_Waiter]) -> int:
        """Send one statement for the batch; hand each other waiter its verdict; ours."""
        run_ids: list[str] = []
        seqs: list[int] = []
        records: list[bytes] = []
        fenced_waiters: list[tuple[_Waiter, int]] = []
        for w in batch:  # the unfenced runs' rows first: the statement takes them as they are
            if w.epoch is not None:
                fenced_waiters.append((w, w.epoch))
                continue
            _add_rows(w, run_ids, seqs, records)
        unfenced_rows = len(seqs)
        fenced: list[str] = []
        epochs: list[int] = []
        for w, epoch in fenced_waiters:
            _add_rows(w, run_ids, seqs, records)
            fenced.append(w.run_id)
            epochs.append(epoch)
        passed: set[str] | None = None
        try:
            rows = await self._lanes.fetch(
                Q["append_group"], run_ids, seqs, records, fenced, epochs, unfenced_rows
            )
            # Refused (a taken seq: a retry or a conflict; a deadlock with a claim; anything
            # the shared statement cannot decide for every run): each run appends alone.
            if not isinstance(rows, asyncpg.PostgresError):
                passed = {row[0] for row in rows}
        finally:
            # Also when the store went away or the leader was cancelled: the others then
            # learn it from their own attempt, idempotent whether or not this one landed.
            for w in batch[1:]:
                if not w.done.done():
                    w.done.set_result(_verdict(w, passed))
        self._groups += 1
        self._grouped += len(batch)
        return _verdict(batch[0], passed)


def _add_rows(w: _Waiter, run_ids: list[str], seqs: list[int], records: list[bytes]) -> None:
    """A waiter's rows onto the statement's columns."""
    if len(w.seqs) == 1:  # a node's record: most appends
        run_ids.append(w.run_id)
        seqs.append(w.seqs[0])
        records.append(w.records[0])
    else:
        run_ids += [w.run_id] * len(w.seqs)
        seqs += w.seqs
        records += w.records


def _verdict(w: _Waiter, passed: set[str] | None) -> int:
    """A waiter's rows inserted, or ALONE: no shared statement, or a fenced run that did not
    pass its fence (fenced off, or its runs row was locked and skipped) appends alone."""
    if passed is None or (w.epoch is not None and w.run_id not in passed):
        return ALONE
    return len(w.seqs)
