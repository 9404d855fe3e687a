"""The record writer: the only code that writes a run's log.

Every record goes through the same three steps, in this order: append it durably
(retrying while the store is unavailable, up to `retry_s`), apply it to the run's graph,
publish it to the runtime's listeners. So a listener (an event stream, the live page,
a parent run) never sees a record the store does not hold, and the graph never holds one
either (invariant 1: only a recorded node is done).

Records are built by the constructors in `tether.model.records`; this module only writes them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import assert_never

from tether.engine.bus import EventBus
from tether.foundation import clock, faults, metrics
from tether.foundation.errors import RunExists, StoreError, StoreUnavailable
from tether.foundation.status import Status
from tether.model.graph import Graph
from tether.model.records import Record, body_of, encode, label_of, waiting_reason
from tether.store.base import RunInfo, Store
from tether.store.forks import NewRun, Origin, Segment

log = logging.getLogger("tether.engine.writer")

# The first pause after a failed attempt; it doubles up to the cap.
FIRST_DELAY_S = 0.05
MAX_DELAY_S = 2.0


@dataclass(frozen=True, slots=True)
class NewFork:
    """A fork to record (`RecordWriter.create_forks`): its row, its seq 0, where it came
    from, the ranges of its source it references and its own records by seq."""

    info: RunInfo
    head: Record
    origin: Origin
    segments: Sequence[Segment]
    own: Mapping[int, Record] = field(default_factory=dict)


class RecordWriter:
    """Appends, applies and publishes records for the runs of one runtime."""

    def __init__(self, store: Store, events: EventBus, *, retry_s: float) -> None:
        self.store = store
        self.events = events
        # How long to keep retrying an append while the store is unavailable.
        self.retry_s = retry_s

    async def create(self, info: RunInfo, record: Record, *, lease_s: float | None = None) -> Graph:
        """Record a new run: its row and its RunStarted at seq 0 in one transaction.

        Returns the run's graph with that record applied. RunExists if the id is taken
        (unless the taker is this very call, whose first attempt landed unacknowledged).
        """
        graph = Graph(info.run_id)
        graph.check(record)
        data = encode(record)
        give_up = clock.monotonic() + self.retry_s

        async def again() -> None:
            try:
                await self.store.runs.create(info, data, lease_s=lease_s)
            except RunExists:
                # The attempt that failed may have committed before the store went away.
                if await self._seq0(info.run_id) != data:
                    raise

        started = time.perf_counter()
        try:
            await self.store.runs.create(info, data, lease_s=lease_s)
        except StoreUnavailable as exc:
            await self._retrying(info.run_id, "create", exc, give_up, again)
        if (m := metrics.active) is not None:
            m.appended("run_started", 1, time.perf_counter() - started)
        graph.apply(record, checked=True)
        self.events.record(info.run_id, 0, record)
        return graph

    async def create_forks(self, forks: Sequence[NewFork]) -> None:
        """Record forks, a fork and the forks of its sub-agent runs: for each its row, its
        RunStarted at seq 0, its own records at their seqs and its references to the rows it
        shares, all in one transaction (`tether.store.forks`): a family is written whole or
        not at all, so a refused fork leaves no queued sub-agent fork behind.

        Nothing is applied: a fork is read back from the store when it is taken up. RunExists
        if an id is taken (unless by this very call's first attempt, as `create` says).
        """
        runs = []
        for fork in forks:
            Graph(fork.info.run_id).check(fork.head)
            entries = [(seq, encode(record)) for seq, record in sorted(fork.own.items())]
            runs.append(NewRun(fork.info, encode(fork.head), fork.origin, fork.segments, entries))
        first = runs[0]
        give_up = clock.monotonic() + self.retry_s

        async def again() -> None:
            try:
                await self.store.forks.create_runs(runs)
            except RunExists:
                if await self._seq0(first.info.run_id) != first.first_record:
                    raise

        try:
            await self.store.forks.create_runs(runs)
        except StoreUnavailable as exc:
            await self._retrying(first.info.run_id, "fork", exc, give_up, again)
        for fork in forks:
            self.events.record(fork.info.run_id, 0, fork.head)

    async def _seq0(self, run_id: str) -> bytes | None:
        rows = await self.store.log.read(run_id, after_seq=-1)
        return rows[0][1] if rows and rows[0][0] == 0 else None

    async def write(self, graph: Graph, record: Record, *, epoch: int | None = None) -> int:
        """Append one record at the graph's next seq, apply it, publish it; return its seq.

        GraphError (before anything is written) if the record does not fit the graph;
        ConflictingRecord or StaleEpoch from the store as `append` says.
        """
        graph.check(record)
        seq = graph.next_seq
        await self.append(graph.run_id, [(seq, encode(record))], epoch=epoch, kind=label_of(record))
        graph.apply(record, checked=True)
        self.events.record(graph.run_id, seq, record)
        return seq

    async def commit(
        self, graph: Graph, batch: Sequence[tuple[Record, bytes]], *, epoch: int | None = None
    ) -> list[str]:
        """Append records already checked against the graph (with their encoded bytes) at
        its next seqs, in one append; apply and publish each; return the nodes that became
        ready. The executor's hot path: one statement per batch of completed nodes."""
        base = graph.next_seq
        if len(batch) == 1:  # a chain's step
            entries: Sequence[tuple[int, bytes]] = ((base, batch[0][1]),)
        else:
            entries = [(base + i, data) for i, (_, data) in enumerate(batch)]
        # The label is for the metrics only: not worked out for nobody.
        kind = label_of(batch[0][0]) if batch and metrics.active is not None else "records"
        await self.append(graph.run_id, entries, epoch=epoch, kind=kind)
        run_id, apply = graph.run_id, graph.apply
        listeners = self.events.record_listeners
        if len(batch) == 1 and not listeners:  # a chain's step: one record, nobody listening
            return apply(batch[0][0], checked=True)
        ready: list[str] = []
        publish = self.events.record
        for i, (record, _) in enumerate(batch):
            ready.extend(apply(record, checked=True))
            if listeners:
                publish(run_id, base + i, record)
        return ready

    async def finish(self, graph: Graph, record: Record, *, epoch: int | None = None) -> bool:
        """Record a run's last record (RunFinished, RunPaused or RunWaiting) with its status in
        the runs table and the release of its lease, in one transaction; apply, publish.

        Nobody therefore sees a finished log with a row still held, or a released row whose
        log goes on. Returns False if the row was not released at `epoch` (a retry whose
        first attempt had released it). StaleEpoch if fenced off, as `write` says.
        """
        graph.check(record)
        seq, data = graph.next_seq, encode(record)
        status, reason = ending_of(record)
        # A parked run is claimed again at its earliest deadline (None: only an event).
        wake_at = record.run_waiting.wake_at_us / 1e6 or None
        released = False

        async def once() -> None:
            nonlocal released
            faults.hit("before_release")
            faults.hit("before_append")
            released = await self.store.leases.release(
                graph.run_id, epoch, status, reason, final=(seq, data), wake_at=wake_at
            )
            faults.hit("after_append")

        await self._durably(graph.run_id, "finish", once)
        graph.apply(record, checked=True)
        self.events.record(graph.run_id, seq, record)
        return released

    async def resume(
        self, graph: Graph, record: Record, *, epoch: int | None = None, version: str | None = None
    ) -> int:
        """Record that a run is taken up again: its RunResumed with its status RUNNING in the
        runs table (and the version it moved to, if any), in one transaction; apply, publish.

        One commit where a record and a status change took two, and nobody sees a running
        row whose log does not say who took it up. StaleEpoch (nothing written) if fenced
        off; ConflictingRecord as `write` says. Returns the record's seq.
        """
        graph.check(record)
        seq, data = graph.next_seq, encode(record)
        started = time.perf_counter()

        async def once() -> None:
            faults.hit("before_append")
            await self.store.runs.set_status(
                graph.run_id, Status.RUNNING, epoch=epoch, version=version, record=(seq, data)
            )
            faults.hit("after_append")

        await self._durably(graph.run_id, "resume", once)
        if (m := metrics.active) is not None:
            m.appended("run_resumed", 1, time.perf_counter() - started)
        graph.apply(record, checked=True)
        self.events.record(graph.run_id, seq, record)
        return seq

    async def _durably(
        self, run_id: str, what: str, attempt: Callable[[], Awaitable[None]]
    ) -> None:
        """`attempt()`, then again while the store is unavailable, up to `retry_s`."""
        give_up = clock.monotonic() + self.retry_s
        try:
            await attempt()
        except StoreUnavailable as exc:
            await self._retrying(run_id, what, exc, give_up, attempt)

    async def append(
        self,
        run_id: str,
        entries: Sequence[tuple[int, bytes]],
        *,
        epoch: int | None = None,
        kind: str = "records",
    ) -> None:
        """Append durably, retrying while the store is away (the same bytes are idempotent).

        ConflictingRecord if another record holds one of these seqs, StaleEpoch if `epoch`
        is no longer the run's; StoreUnavailable once `retry_s` has passed without success.
        `kind` (the first record's body) labels the append's metrics.
        """
        # The first attempt inline: no closure, no extra coroutine, no call for a fault
        # point or a metric that is not there, on the path of every node's record.
        m = metrics.active  # (read once: the clock is read only for metrics that count)
        started = time.perf_counter() if m is not None else 0.0
        give_up = clock.monotonic() + self.retry_s
        try:
            if faults.PLANNED:
                faults.hit("before_append")
            await self.store.log.append(run_id, entries, epoch=epoch)
            if faults.PLANNED:
                faults.hit("after_append")
        except StoreUnavailable as exc:
            try:
                await self._retrying(
                    run_id,
                    "append",
                    exc,
                    give_up,
                    lambda: self._append_once(run_id, entries, epoch),
                )
            except StoreError as failed:
                if m is not None:
                    m.append_failed(failed)
                raise
        except StoreError as exc:
            if m is not None:
                m.append_failed(exc)
            raise
        if m is not None:
            m.appended(kind, len(entries), time.perf_counter() - started)

    async def _append_once(
        self, run_id: str, entries: Sequence[tuple[int, bytes]], epoch: int | None
    ) -> None:
        faults.hit("before_append")
        await self.store.log.append(run_id, entries, epoch=epoch)
        faults.hit("after_append")

    async def _retrying(
        self,
        run_id: str,
        what: str,
        exc: StoreUnavailable,
        give_up: float,
        attempt: Callable[[], Awaitable[None]],
    ) -> None:
        """After a first attempt failed with `exc`: back off, then `attempt()` again until it
        does not raise StoreUnavailable, or raise that once `give_up` (monotonic) has passed."""
        delay = FIRST_DELAY_S
        while True:
            if clock.monotonic() > give_up:
                raise exc
            log.warning(
                "run %s: store unavailable for %s (%s), retrying in %.2fs", run_id, what, exc, delay
            )
            await clock.sleep(delay)
            delay = min(delay * 2, MAX_DELAY_S)
            try:
                await attempt()
                return
            except StoreUnavailable as again:
                exc = again


def ending_of(record: Record) -> tuple[Status, str | None]:
    """The status and reason a run's last record gives its row."""
    match body := body_of(record):
        case "run_paused":
            return Status.PAUSED, record.run_paused.reason or None
        case "run_waiting":
            return Status.WAITING, waiting_reason(record.run_waiting)
        case "run_finished":
            return Status.from_pb(record.run_finished.status), record.run_finished.error or None
        case (
            "run_started"
            | "node_completed"
            | "node_failed"
            | "run_resumed"
            | "step_recorded"
            | None
        ):
            raise ValueError(f"a {body} record does not end a run")
        case never:
            assert_never(never)
