"""Group commit on PostgreSQL: statements of many runs share one while others are in flight.

A statement (an append, a finish) goes out alone, at once, whenever fewer than `statements`
of its kind are in flight (so a lone run never waits for a batch that will not come;
`statements=0`: always). Otherwise it queues; when a statement finishes, everything queued
(one per run, up to `max_rows` rows) leaves as one shared statement, led by the first
waiter, and each waiter learns whether the shared statement did its work. A run the shared
statement could not decide for (fenced off, its runs row locked, or any taken seq in the
statement) goes alone, and the caller judges the outcome for its run alone, exactly as
after a lone statement.

`GroupCommit` is the queue and its leaders; what a statement is comes from two functions,
one run's statement alone and the batch's shared one (`append_together` here for appends,
`store/postgres_finishes.py` for finishes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar, cast

import asyncpg

from tether.store.postgres.arrays import int_array, text_array
from tether.store.postgres.lanes import AppendLanes
from tether.store.queries import load_queries

Q = load_queries("postgres")

# Statements in flight before the next one queues for a shared statement. Two keeps the
# server's commit path busy (one statement committing while the next is sent) without
# splitting a burst of appends into many small statements.
DEFAULT_STATEMENTS = 2
DEFAULT_MAX_ROWS = 4096

# A waiter's verdict: ALONE (go by yourself: the shared statement could not decide for
# every run), else what the shared statement did for it (an append: rows inserted).
ALONE = -1


class Waiter:
    """One run's statement, queued for a shared one (a plain class: a dataclass's default
    factory cost a call a waiter); `done` is set when it queues."""

    __slots__ = ("done", "rows", "run_id")

    done: asyncio.Future[int | list[Waiter]]

    def __init__(self, run_id: str, rows: int) -> None:
        self.run_id = run_id
        self.rows = rows


W = TypeVar("W", bound=Waiter)


class GroupCommit(Generic[W]):
    """Counts the statements in flight and turns the queued ones into shared statements.

    `alone(w)`: w's statement by itself, its verdict. `together(batch)`: one statement for
    the batch (one waiter a run), a verdict for each waiter in order. `noun` names the
    counters in `statistics()`."""

    def __init__(
        self,
        alone: Callable[[W], Awaitable[int]],
        together: Callable[[list[W]], Awaitable[list[int]]],
        noun: str,
        *,
        statements: int = DEFAULT_STATEMENTS,
        max_rows: int = DEFAULT_MAX_ROWS,
    ) -> None:
        self._alone = alone
        self._together = together
        self._noun = noun
        self.statements = statements
        self.max_rows = max_rows
        self.inflight = 0
        self._queue: list[W] = []
        # Counters for statistics(): shared statements sent, the waiters they carried, and
        # those of them that the statement could not decide for, which then went alone.
        self._groups = 0
        self._grouped = 0
        self._undecided = 0

    def statistics(self) -> dict[str, int]:
        return {
            "group_statements": self._groups,
            f"grouped_{self._noun}": self._grouped,
            f"undecided_{self._noun}": self._undecided,
        }

    def enter(self) -> bool:
        """Whether a statement may go out alone now; if so it counts as in flight until
        `leave()`. For a caller that sends its statement itself: `submit`'s first case
        without a waiter or a coroutine, on the path of every node's record."""
        if self.inflight < self.statements or self.statements == 0:
            self.inflight += 1
            return True
        return False

    async def submit(self, w: W) -> int:
        """w's verdict, from `alone(w)` or from a shared statement."""
        if self.enter():
            try:
                return await self._alone(w)
            finally:
                self.leave()
        done: asyncio.Future[int | list[Waiter]] = asyncio.get_running_loop().create_future()
        w.done = done
        self._queue.append(w)
        try:
            got = await done
        except asyncio.CancelledError:
            if done.done() and not done.cancelled():
                self._abdicate(done.result())
            raise
        if isinstance(got, list):
            try:
                got = await self._lead(got)
            finally:
                self.leave()
        if got == ALONE:
            self._undecided += 1
            self.inflight += 1
            try:
                return await self._alone(w)
            finally:
                self.leave()
        return got

    def _abdicate(self, got: int | list[Waiter]) -> None:
        """A waiter cancelled after it was made leader: the others go alone."""
        if isinstance(got, list):
            for w in got[1:]:
                if not w.done.done():
                    w.done.set_result(ALONE)
            self.leave()

    def leave(self) -> None:
        """One statement less in flight: hand what queued meanwhile to a new leader."""
        self.inflight -= 1
        queue = self._queue
        while queue and self.inflight < self.statements:
            batch: list[Waiter] = []
            runs: set[str] = set()
            rows = 0
            taken = 0
            for w in queue:
                if w.done.done():  # cancelled while queued
                    taken += 1
                    continue
                if w.run_id in runs or (batch and rows + w.rows > self.max_rows):
                    break  # a run's second statement waits for the next one
                batch.append(w)
                runs.add(w.run_id)
                rows += w.rows
                taken += 1
            del queue[:taken]
            if batch:
                self.inflight += 1
                batch[0].done.set_result(batch)

    async def _lead(self, batch: list[Waiter]) -> int:
        """Send one statement for the batch; hand each other waiter its verdict; ours."""
        verdicts: list[int] | None = None
        try:
            verdicts = await self._together(cast("list[W]", batch))  # our queue's waiters
        finally:
            # Also when the store went away or the leader was cancelled: the others then
            # learn it from their own attempt, idempotent whether or not this one landed.
            for i in range(1, len(batch)):
                done = batch[i].done
                if not done.done():
                    done.set_result(ALONE if verdicts is None else verdicts[i])
        self._groups += 1
        self._grouped += len(batch)
        return verdicts[0]


class Append(Waiter):
    """An append of one run: its rows, fenced at `epoch` if given."""

    __slots__ = ("epoch", "records", "seqs")

    def __init__(
        self, run_id: str, seqs: list[int], records: list[bytes], epoch: int | None
    ) -> None:
        self.run_id = run_id
        self.rows = len(seqs)
        self.seqs = seqs
        self.records = records
        self.epoch = epoch


async def append_together(lanes: AppendLanes, batch: list[Append]) -> list[int]:
    """One `append_group` statement for the batch; each append's rows inserted, or ALONE
    (the statement was refused, or a fenced run did not pass its fence)."""
    run_ids: list[str] = []
    seqs: list[int] = []
    records: list[bytes] = []
    fenced_appends: list[tuple[Append, int]] = []
    for w in batch:  # the unfenced runs' rows first: the statement takes them as they are
        if w.epoch is not None:
            fenced_appends.append((w, w.epoch))
            continue
        _add_rows(w, run_ids, seqs, records)
    unfenced_rows = len(seqs)
    fenced: list[str] = []
    epochs: list[int] = []
    firsts: list[int] = []  # each fenced append's first seq: it must follow the log
    for w, epoch in fenced_appends:
        _add_rows(w, run_ids, seqs, records)
        fenced.append(w.run_id)
        epochs.append(epoch)
        firsts.append(w.seqs[0])
    rows = await lanes.fetch(
        Q["append_group"],
        text_array(run_ids),
        int_array(seqs),
        records,
        text_array(fenced),
        int_array(epochs),
        unfenced_rows,
        int_array(firsts),
    )
    # Refused (a taken seq: a retry or a conflict; a deadlock with a claim; anything the
    # shared statement cannot decide for every run): each run appends alone.
    if isinstance(rows, asyncpg.PostgresError):
        return [ALONE] * len(batch)
    # A fenced run that did not pass its fence (fenced off, its runs row was locked and
    # skipped, or its first seq does not follow its log) appends alone.
    passed = {row[0] for row in rows}
    return [w.rows if w.epoch is None or w.run_id in passed else ALONE for w in batch]


def _add_rows(w: Append, run_ids: list[str], seqs: list[int], records: list[bytes]) -> None:
    """An append's rows onto the statement's columns."""
    if w.rows == 1:  # a node's record: most appends
        run_ids.append(w.run_id)
        seqs.append(w.seqs[0])
        records.append(w.records[0])
    else:
        run_ids += [w.run_id] * w.rows
        seqs += w.seqs
        records += w.records
