"""The runtime: start, rehydrate, resume and drain runs on one store."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from tether.blobs import BlobStore
from tether.blobs.sealed import SealedBlobStore
from tether.engine.bus import EventBus
from tether.engine.continuity import check_run
from tether.engine.delivery import Delivered, deliver
from tether.engine.executor import Outcome, RunExecutor
from tether.engine.ownership import DEFAULT_LEASE_TTL, LeaseKeeper, admissible
from tether.engine.registry import Registry, resolve_agent
from tether.engine.writer import RecordWriter
from tether.foundation import eager
from tether.foundation.core import Budget, Usage
from tether.foundation.crypto.keyring import KeyRing
from tether.foundation.crypto.runkeys import DataShredded, RunKeyBox, new_run_key, unwrap
from tether.foundation.errors import (
    BudgetSpent,
    CannotContinue,
    ChildFailed,
    ChildPaused,
    ChildWaiting,
    ConflictingRecord,
    CorruptRecord,
    KeyRingError,
    LogGap,
    RecordTooLarge,
    RunExists,
    RunNotResumable,
    StoreError,
    StoreFull,
    UnknownAgent,
    UnknownRun,
    UnknownSeq,
)
from tether.foundation.ids import ROOT_ID, check_run_id, child_run_id, new_run_id
from tether.model.budgets import Change
from tether.model.columns import applied, applied_turns
from tether.model.graph import Graph
from tether.model.records import (
    decode_log,
    dump_json,
    limits_of,
    run_finished,
    run_resumed,
    run_started,
)
from tether.model.values import DEFAULT_OFFLOAD_THRESHOLD, ValueCodec
from tether.ops.fork import fork
from tether.ops.schedules import Schedules
from tether.store.base import Claim, RunInfo, Status, Store
from tether.store.keys import fetcher
from tether.store.limits import check_key, check_priority

DEFAULT_RECORD_CAP = 64 * 1024
# How many times one execution reloads a run whose log refused an append (LogGap) before it
# gives up: each reload follows a loss of the log's tail, which a failover makes once.
MAX_RELOADS = 5

log = logging.getLogger("tether.engine.runtime")


class Runtime:
    """Runs agents on a store. One per process is typical; it is cheap.

    With `blobs`, values (node outputs, successor and run inputs) whose JSON is over
    `offload_threshold` bytes go to the blob store and records keep only their refs, and
    handlers can `ctx.attach` files. The caller owns (and closes) both stores.
    """

    def __init__(
        self,
        store: Store,
        *,
        concurrency: int = 64,
        grace: float = 25.0,
        record_cap: int = DEFAULT_RECORD_CAP,
        store_retry_s: float = 120.0,
        owner: str | None = None,
        blobs: BlobStore | None = None,
        offload_threshold: int = DEFAULT_OFFLOAD_THRESHOLD,
        keys: KeyRing | None = None,
        lease_ttl: float = DEFAULT_LEASE_TTL,
        per_run_keys: bool = False,
    ) -> None:
        self.store = store
        # With a key ring, every Value's JSON and every blob is sealed before it is written.
        self.keys = keys
        # Every new run gets its own data key (as an agent's `per_run_keys=True` asks).
        self.per_run_keys = per_run_keys
        if keys is not None and blobs is not None and not isinstance(blobs, SealedBlobStore):
            blobs = SealedBlobStore(blobs, keys)
        self.blobs = blobs
        self.offload_threshold = offload_threshold
        self.concurrency = concurrency
        self.grace = grace
        self.record_cap = record_cap
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self.events = EventBus()
        # The only code that appends to a log, applies to a graph and publishes records.
        self.writer = RecordWriter(store, self.events, retry_s=store_retry_s)
        self.draining = asyncio.Event()
        self.hurry = asyncio.Event()
        # Agents whose concurrency limits given in code this runtime stored (`create`).
        self._limits_stored: set[str] = set()
        # The runs executing in this process (sub-agent runs included), by run id.
        self.executing: dict[str, RunExecutor] = {}
        # Runs started or resumed here are owned under a lease, as a worker's claims are.
        self.keeper = LeaseKeeper(
            store.leases, store.runs, self.owner, lease_ttl, on_cancel=self.request_cancel
        )

    @property
    def schedules(self) -> Schedules:
        """Add, list and remove the store's schedules; fire the due ones."""
        return Schedules(self)

    @property
    def lease_ttl(self) -> float:
        """Seconds the lease of a run executing in-process lasts without renewal."""
        return self.keeper.ttl

    @property
    def store_retry_s(self) -> float:
        """How long appends (and releases) keep retrying while the store is unavailable."""
        return self.writer.retry_s

    @store_retry_s.setter
    def store_retry_s(self, seconds: float) -> None:
        self.writer.retry_s = seconds

    def new_codec(self) -> ValueCodec:
        """A codec that reads any run's values (run keys fetched when first named); what it
        encodes is sealed under the ring's current key. `codec_for` writes as a run."""
        if self.keys is None:
            return ValueCodec(self.blobs, threshold=self.offload_threshold)
        box = RunKeyBox(self.keys, fetcher(self.store.keys))
        blobs = self.blobs.for_run(box) if isinstance(self.blobs, SealedBlobStore) else self.blobs
        return ValueCodec(blobs, threshold=self.offload_threshold, keys=self.keys, box=box)

    async def codec_for(self, run_id: str, *, new_key: bool = False) -> ValueCodec:
        """A codec that writes as run `run_id`: under its own data key if it has one (or,
        with `new_key`, one made now and stored wrapped by the ring), else as `new_codec`."""
        codec = self.new_codec()
        if codec.box is None:
            return codec
        key: bytes | None = None
        if new_key:
            made, wrapped = new_run_key(codec.box.base, run_id)
            if await self.store.keys.put(run_id, wrapped):
                key = made  # else the run has a row already: a retried create, a shredded id
        if key is None:
            row = await fetcher(self.store.keys)(run_id)
            if row is not None:
                if row[0] is None:
                    raise DataShredded(run_id, row[1])
                key = unwrap(codec.box.base, run_id, row[0])
        if key is not None:
            codec.box.bind(run_id, key)
        return codec

    def check_record_size(self, run_id: str, node_id: str, data: bytes) -> None:
        """RecordTooLarge if an encoded record is over `record_cap`."""
        if len(data) > self.record_cap:
            raise RecordTooLarge(run_id, node_id, len(data), self.record_cap)

    async def signal(
        self,
        run_id: str,
        key: str,
        payload: Any = None,
        *,
        event_id: str | None = None,
        wait_s: float = 30.0,
    ) -> Delivered:
        """Deliver an event to wait `key` of a run; return once it is recorded in the log.

        The payload becomes the wait's output and its successors run: at once if the run
        executes in this process, else when a worker (or `resume`) takes the parked run up.
        With `event_id`, a repeated delivery of the same event is a no-op (`duplicate`).
        Refused, recording nothing: UnknownRun; UnknownWait (no such key, or not open yet:
        events are not buffered); WaitCompleted (answered already, timed out, a sleep, or the
        run finished); BadEventPayload (not JSON, or not fitting the wait's schema);
        RunHeldElsewhere if another process holds the run for longer than `wait_s`.
        """
        return await deliver(self, run_id, key, payload, event_id=event_id or "", wait_s=wait_s)

    async def fork(
        self,
        run_id: str,
        *,
        at_seq: int | None = None,
        before_node: str | None = None,
        set_outputs: Mapping[str, Any] | None = None,
        set_inputs: Mapping[str, Any] | None = None,
        budget: Budget | Change | None = None,
    ) -> str:
        """Create a queued run whose history is `run_id`'s records up to `at_seq` (or up to
        just before `before_node` was recorded), with the outputs in `set_outputs` replacing
        those recorded and the inputs in `set_inputs` those of nodes pending there; return
        its id. Nodes pending there run again when it is taken up. The fork references the
        source's records instead of copying them: it costs a few rows however long the run.
        `budget`: new limits, a Budget or a change (`budgets.parse_change("nodes=+2")`)
        whose `+N` is N more than the source had used at the fork point.

        UnknownRun; BadFork (nothing stored) for a seq past the end or at the run's end, an
        unknown or unrecorded node, an output override of a node not completed by then, an
        input override of a node not pending then.
        """
        return await fork(
            self,
            run_id,
            at_seq=at_seq,
            before_node=before_node,
            set_outputs=set_outputs,
            set_inputs=set_inputs,
            budget=budget,
        )

    def drain(self) -> None:
        """Stop launching nodes everywhere; in-flight ones finish and are recorded, runs pause.

        A second call ends the grace period at once: what is still in flight is cancelled,
        unrecorded, and runs again on resume.
        """
        if self.draining.is_set():
            self.hurry.set()
        self.draining.set()
        for executor in list(self.executing.values()):
            executor.wake()

    def in_flight(self) -> int:
        """How many nodes are executing in this process now (sub-agent runs' included)."""
        return sum(ex.in_flight for ex in self.executing.values())

    def request_cancel(self, run_id: str) -> RunExecutor | None:
        """Tell a run executing here (and its sub-agent runs) to stop; its executor, or None."""
        here = self.executing.get(run_id)
        if here is not None:
            # Children first: one interrupted by its parent's node being cancelled then
            # knows to record its own cancellation rather than vanish unrecorded.
            for rid, child in list(self.executing.items()):
                if rid.startswith(f"{run_id}."):
                    child.request_cancel()
            here.request_cancel()
        return here

    async def cancel(self, run_id: str, *, epoch: int | None = None) -> Outcome:
        """Finish a run as CANCELLED: stop launching, cancel in-flight nodes, record it.

        A run executing in this process (and its sub-agent runs here) is stopped by its
        executor; one executing nowhere (paused, queued, orphaned) gets its RunFinished
        appended here, fenced by `epoch` when the caller claimed the run for that.
        RunNotResumable if the run had already finished.
        """
        here = self.request_cancel(run_id)
        if here is not None:
            await here.finished.wait()
            return await self.outcome(run_id)
        for _ in range(5):
            graph = await self.load(run_id)
            if graph.finished is not None:
                raise RunNotResumable(f"run {run_id} has finished ({graph.status}); cannot cancel")
            record = run_finished(Status.CANCELLED, error="cancelled by request")
            try:
                await self.writer.finish(graph, record, epoch=epoch)
            except ConflictingRecord:
                continue  # a record landed at that seq meanwhile: read the log again
            return await self._read_outcome(graph)
        raise RunNotResumable(f"run {run_id} keeps growing while not owned here; cannot cancel")

    # -- creating and loading ----------------------------------------------------

    async def create(
        self,
        agent: Registry | str,
        input: Any = None,
        *,
        run_id: str | None = None,
        budget: Budget | None = None,
        config: dict[str, Any] | None = None,
        status: Status = Status.QUEUED,
        parent: tuple[str, str] | None = None,
        key: str | None = None,
        priority: int = 0,
    ) -> Graph:
        """Record a new run (RunStarted at seq 0) without executing it.

        A top-level run created RUNNING is this runtime's from its first record, at epoch 1
        under a lease (`start` keeps it alive). `key` and `priority` are its concurrency key
        and priority (tether.store.limits).
        """
        registry = agent if isinstance(agent, Registry) else resolve_agent(agent)
        if registry.entry is None:
            raise ValueError(f"agent {registry.name!r} has no handlers")
        # The run keeps the name it was asked for by (`pkg.mod:agent`, an entry point), so
        # a worker in another process can find the agent the same way.
        name = agent if isinstance(agent, str) else registry.name
        if parent is None:  # checked at the door: nothing is recorded for a bad input or id
            run_id = check_run_id(run_id) if run_id is not None else new_run_id()
            input = registry.check_input(input)
            registry.check_ready(here=status is Status.RUNNING)
            key, priority = check_key(key) or None, check_priority(priority)
            await self._store_limit_defaults(name, registry)
        run_id = run_id or new_run_id()
        own_key = self.per_run_keys or registry.per_run_keys
        if own_key and self.keys is None:
            raise KeyRingError(
                f"agent {name!r} gives each run its own data key (per_run_keys), which needs "
                "a key ring: pass Runtime(keys=...) or set TETHER_KEYS"
            )
        if parent is not None and self.keys is not None and not own_key:
            # A sub-agent run of a run with its own key has its own too (shredded with it).
            own_key = parent[0] in await self.store.keys.get([parent[0]])
        codec = await self.codec_for(run_id, new_key=own_key)
        record = run_started(
            name,
            await codec.encode(input),
            entry=registry.entry,
            root_id=ROOT_ID,
            config=dump_json(config) if config else b"",
            limits=limits_of(budget),
            parent=parent,
            version=registry.version,
        )
        owned = status is Status.RUNNING
        leased = owned and parent is None
        info = RunInfo(
            run_id=run_id,
            agent=name,
            status=status,
            parent_run_id=parent[0] if parent else None,
            owner=self.owner if owned else None,
            epoch=1 if leased else 0,
            agent_version=registry.version,
            key=key,
            priority=priority,
        )
        return await self.writer.create(info, record, lease_s=self.lease_ttl if leased else None)

    async def _store_limit_defaults(self, name: str, registry: Registry) -> None:
        """Store the concurrency limits the agent's code brings, once per name here, unless
        limits of their scope are set already (a limit set by hand wins)."""
        if not registry.limit_defaults or name in self._limits_stored:
            return
        for limit in registry.limit_defaults:
            await self.store.limits.set(replace(limit, agent=name), only_if_missing=True)
        self._limits_stored.add(name)

    async def load(self, run_id: str, *, at_seq: int | None = None) -> Graph:
        """Rehydrate a run: read its log in seq order, decode, apply. With `at_seq`, the run
        as it was once the record at that seq was applied (UnknownSeq if it has none)."""
        rows = await self._rows(run_id)
        if at_seq is not None:
            if not 0 <= at_seq < len(rows):
                raise UnknownSeq(run_id, at_seq, len(rows) - 1)
            rows = rows[: at_seq + 1]
        return applied(Graph(run_id), rows)

    async def _rows(self, run_id: str) -> list[bytes]:
        """The run's whole log; UnknownRun if it has none."""
        rows = await self.store.log.read_all(run_id)
        if not rows:
            raise UnknownRun(run_id)
        return rows

    async def catch_up(self, graph: Graph) -> Graph:
        """Bring a graph loaded earlier up to date: read and apply only the records its run
        appended since (none, usually), so a caller that loaded the run before taking it
        hands it on instead of the run being read and rebuilt twice."""
        entries = await self.store.log.read(graph.run_id, after_seq=graph.next_seq - 1)
        for i, (seq, _) in enumerate(entries):
            if seq != graph.next_seq + i:
                raise CorruptRecord(graph.run_id, seq, f"follows seq {graph.next_seq + i - 1}")
        return applied(graph, [row for _, row in entries])

    # -- executing ---------------------------------------------------------------

    async def start(
        self,
        agent: Registry | str,
        input: Any = None,
        *,
        run_id: str | None = None,
        budget: Budget | None = None,
        config: dict[str, Any] | None = None,
        key: str | None = None,
        priority: int = 0,
    ) -> Outcome:
        """Start a run and execute it until it finishes, fails or pauses.

        The run is owned here under a lease, renewed while it executes: if this process
        dies, a worker (or `tether resume`) takes the run over once the lease runs out.
        It starts at once, not through a claim: it holds a slot of its `key` (counted by
        the claims of workers) but does not wait for one; `submit` queues within limits.
        """
        graph = await self.create(
            agent,
            input,
            run_id=run_id,
            budget=budget,
            config=config,
            status=Status.RUNNING,
            key=key,
            priority=priority,
        )
        async with self.keeper.holding(Claim(graph.run_id, 1)):
            return await self.execute(graph, epoch=1)

    async def resume(
        self,
        run_id: str,
        *,
        budget: Budget | None = None,
        epoch: int | None = None,
        force: bool = False,
        graph: Graph | None = None,
        claim: Claim | None = None,
    ) -> Outcome:
        """Rehydrate a run from its log and continue it (with new limits, if given).

        The run is taken under a lease first: RunBusy (naming the owner and the seconds left
        on its lease) if someone holds it, unless `force`, which takes it over at a new
        epoch and so fences the old owner. With `epoch`, the caller holds it already (and
        keeps it alive); with `claim` (from `take_loading`), the caller took it and this
        keeps it alive. With `graph` (the run as the caller loaded it, handed over), only
        the records appended since are read.
        """
        for what, given in (("graph", graph), ("claim", claim)):
            if given is not None and given.run_id != run_id:
                raise ValueError(f"resume of run {run_id} was given the {what} of {given.run_id}")
        if epoch is not None:
            return await self._resume_held(run_id, budget, epoch, graph)
        if claim is None and graph is None:  # read first, taken while it is built
            claim, graph = await self.take_loading(run_id, force=force)
        elif claim is None:
            claim = await self.keeper.take(run_id, force=force)
        if claim is None:
            raise await self.keeper.not_taken(run_id, "resume")
        async with self.keeper.holding(claim):
            if claim.cancel:  # asked to cancel while nobody held it: record that instead
                return await self.cancel(run_id, epoch=claim.epoch)
            return await self._resume_held(run_id, budget, claim.epoch, graph)

    async def _resume_held(
        self, run_id: str, budget: Budget | None, epoch: int, loaded: Graph | None
    ) -> Outcome:
        # Read under the lease: records appended before it was taken are all there.
        if loaded is None:
            graph = await self.load(run_id)
        else:
            executor = await self._take_up_as_loaded(loaded, budget, epoch)
            if executor is not None:
                try:
                    return await executor.execute()
                except LogGap as gap:
                    return await self._reloaded(gap, executor.graph, budget, epoch)
            graph = await self.catch_up(loaded)
        try:  # finished (its row may still say otherwise), or paused by its budget
            admissible(graph, budget)
        except (RunNotResumable, BudgetSpent):
            await self.keeper.release(run_id, epoch, graph.status, graph.reason or None)
            raise
        return await self.continue_graph(graph, budget=budget, epoch=epoch)

    async def _take_up_as_loaded(
        self, graph: Graph, budget: Budget | None, epoch: int
    ) -> RunExecutor | None:
        """Take up a run as the caller loaded it, without reading its log again: its
        RunResumed goes at the graph's next seq, which any record appended since the load
        holds, so then the append is refused (ConflictingRecord) and writes nothing. None
        when the graph may be behind: a conflict, or a refusal (finished, budget spent,
        code that cannot continue it), which is only ever said of a graph caught up."""
        try:
            admissible(graph, budget)
            registry = await self.registry_for(graph)
            executor = RunExecutor(self, graph, registry, epoch=epoch)
            await self._record_resumed(graph, registry, budget, epoch)
        except (RunNotResumable, BudgetSpent, CannotContinue, ConflictingRecord, LogGap):
            return None
        return executor

    async def take_loading(self, run_id: str, *, force: bool = False) -> tuple[Claim | None, Graph]:
        """Read a run's log, then take its lease while the run is built: the claim (None
        when it is not to be had: held, finished, unknown) and the run as read. Then
        `resume` with both (a record appended between the read and the take is caught up
        there, as after any earlier read), or `give_back` the claim.

        A fresh process then waits for the take's round trips and its commit while it
        builds the run (answered in the turns the build gives the loop), not after; on a
        store whose statements wait for the build instead (`Store.io_beside_work`: SQLite)
        the take follows it. A run that does not build gives back the lease it took, the
        run paused with why.
        """
        if not self.store.io_beside_work:
            graph = await self.load(run_id)
            return await self.keeper.take(run_id, force=force), graph
        rows = await self._rows(run_id)
        taking = eager.start(
            asyncio.get_running_loop(),
            self.keeper.take(run_id, force=force),
        )
        try:
            graph = await applied_turns(Graph(run_id), rows)
        except BaseException as exc:  # (what the take raised, if it did, says less)
            (taken,) = await asyncio.gather(taking, return_exceptions=True)
            if isinstance(taken, Claim):
                why = f"resume could not rebuild the run: {type(exc).__name__}: {exc}"
                await self.keeper.release(run_id, taken.epoch, Status.PAUSED, why)
            raise
        return await taking, graph

    async def give_back(self, claim: Claim, graph: Graph) -> None:
        """Release a claim from `take_loading` of a paused run that is not resumed after
        all (its budget is spent): paused again, for the reason its log gives."""
        await self.keeper.release(claim.run_id, claim.epoch, Status.PAUSED, graph.reason or None)

    async def continue_graph(
        self,
        graph: Graph,
        *,
        budget: Budget | None = None,
        epoch: int | None = None,
        retry: bool = False,
    ) -> Outcome:
        """Record that the run is taken up again (moved to this code's version, if it was on
        a compatible one; with `retry`, a failed run reopened: `tether.control.actions.retry`),
        then execute it.

        An append the log refuses because it does not follow the log's last record
        (LogGap: the log lost its tail, as after a failover to an asynchronous standby)
        means this process's view of the run is stale: the execution stops, the run is read
        again from its log and continued from what it holds, so the nodes whose records
        were lost run again, once (`MAX_RELOADS` times at most, then LogGap)."""
        try:
            return await self._continue(graph, budget, epoch, retry=retry)
        except LogGap as gap:
            return await self._reloaded(gap, graph, budget, epoch, retry=retry)

    async def _reloaded(
        self,
        gap: LogGap,
        graph: Graph,
        budget: Budget | None,
        epoch: int | None,
        *,
        retry: bool = False,
    ) -> Outcome:
        """After the log refused an append of `graph` (LogGap): the run read again from its
        log and continued at the same epoch, again while the log refuses (`continue_graph`
        says why). Its RunResumed is recorded again (with `budget`, if given) only if the
        log lost the one that took it up at this epoch: one take-up an epoch (a retry's
        too, which then finds the run failed again and reopens it again)."""
        for _ in range(MAX_RELOADS):
            rows = await self._rows(graph.run_id)
            held = applied(Graph(graph.run_id), rows)
            kept = set(held.order)
            lost = [node_id for node_id in graph.order if node_id not in kept]
            log.warning(
                "run %s: %s; reloaded from its log, continuing after seq %d (%d nodes whose "
                "records were lost run again: %s)",
                graph.run_id,
                gap,
                held.next_seq - 1,
                len(lost),
                ", ".join(lost[:10]) + (" ..." if len(lost) > 10 else ""),
            )
            graph = held
            reopen = retry and graph.finished is not None  # the retry's own record was lost
            if graph.finished is not None and not reopen:  # (its last record held)
                return await self._read_outcome(graph)
            try:
                if not reopen and epoch is not None and _taken_up_at(graph.run_id, rows) == epoch:
                    executor = RunExecutor(self, graph, await self.registry_for(graph), epoch=epoch)
                    return await executor.execute()
                return await self._continue(graph, budget, epoch, retry=reopen)
            except LogGap as exc:
                gap = exc
        raise gap

    async def _continue(
        self, graph: Graph, budget: Budget | None, epoch: int | None, *, retry: bool = False
    ) -> Outcome:
        try:
            registry = await self.registry_for(graph)
        except CannotContinue as exc:
            if epoch is not None:  # give it back queued, with why, for a worker that can
                if retry:  # reopened all the same: code that can continue it does
                    reopened = run_resumed(self.owner, epoch, retry=True)
                    await self.writer.write(graph, reopened, epoch=epoch)
                reason = f"{exc.why} ({self.owner}); waiting for a worker that can continue it"
                await self.keeper.release(graph.run_id, epoch, Status.QUEUED, reason)
            raise
        executor = RunExecutor(self, graph, registry, epoch=epoch)
        await self._record_resumed(graph, registry, budget, epoch, retry=retry)
        return await executor.execute()

    async def _record_resumed(
        self,
        graph: Graph,
        registry: Registry,
        budget: Budget | None,
        epoch: int | None,
        *,
        retry: bool = False,
    ) -> None:
        """Append RunResumed (moving the run to `registry`'s version, if it was on another
        compatible one; `retry`: reopening a failed run) with its status RUNNING, and apply
        it."""
        limits = limits_of(budget) if budget is not None else None
        moved = registry.version if graph.agent_version not in ("", registry.version) else ""
        resumed = run_resumed(self.owner, epoch, limits, version=moved, retry=retry)
        try:
            await self.writer.resume(graph, resumed, epoch=epoch, version=moved or None)
        except StoreFull as exc:  # still no space: given back paused, with why
            if epoch is not None:
                with contextlib.suppress(StoreError):
                    await self.keeper.release(graph.run_id, epoch, Status.PAUSED, str(exc))
            raise

    async def registry_for(self, graph: Graph) -> Registry:
        """The agent code in this process that continues `graph`; CannotContinue (nothing
        recorded) when its agent does not resolve here, lacks a pending node's kind, a
        pending input does not fit, or the run is on a version this code does not accept."""
        try:
            registry = resolve_agent(graph.agent)
        except UnknownAgent as exc:
            raise CannotContinue(graph.run_id, graph.agent, str(exc)) from None
        problems = await check_run(registry, graph, codec=self.new_codec())
        if problems:
            missing = registry.missing(graph.pending_kinds())
            why = "; ".join(p.detail for p in problems)
            raise CannotContinue(graph.run_id, graph.agent, why, tuple(missing))
        return registry

    async def submit(
        self,
        agent: Registry | str,
        input: Any = None,
        *,
        run_id: str | None = None,
        budget: Budget | None = None,
        config: dict[str, Any] | None = None,
        key: str | None = None,
        priority: int = 0,
    ) -> str:
        """Queue a run for any worker on this store; return its id. Workers claim it
        within the concurrency limits of its agent and `key`, higher `priority` first."""
        graph = await self.create(
            agent,
            input,
            run_id=run_id,
            budget=budget,
            config=config,
            key=key,
            priority=priority,
        )
        await self.store.leases.notify()
        return graph.run_id

    async def execute(self, graph: Graph, *, epoch: int | None = None) -> Outcome:
        """Execute a freshly created (or already resumed) graph; reloaded from its log if
        the log refuses an append (LogGap), as `continue_graph` says."""
        try:
            return await RunExecutor(self, graph, resolve_agent(graph.agent), epoch=epoch).execute()
        except LogGap as gap:
            return await self._reloaded(gap, graph, None, epoch)

    async def run_child(
        self,
        parent: RunExecutor,
        node_id: str,
        agent: Registry | str,
        input: Any,
        *,
        key: str = "",
        budget: Budget | None = None,
    ) -> tuple[Any, Usage]:
        """Run (or resume, or read back) the sub-agent run of a node; return (result, usage)."""
        run_id = child_run_id(parent.graph.run_id, node_id, key)
        try:
            graph = await self.create(
                agent,
                input,
                run_id=run_id,
                budget=budget,
                status=Status.RUNNING,
                parent=(parent.graph.run_id, node_id),
            )
            fresh = True
        except RunExists:
            graph = await self.load(run_id)
            fresh = False
        retrying = (
            graph.status is Status.FAILED
            and graph.finished is not None
            and parent.graph.last_attempt(node_id) > 0
        )
        if retrying:
            # The parent's node failed before and runs again (the parent was retried): its
            # failed sub-agent run is retried with it, at a child epoch as any write of it.
            epoch = None
            if parent.epoch is not None:
                epoch = await self.store.leases.adopt_child(
                    run_id, self.owner, parent.graph.run_id, parent.epoch
                )
            outcome = await self.continue_graph(graph, epoch=epoch, retry=True)
        elif graph.finished is not None:
            await self._settle_child_row(parent, graph)
            outcome = await self._read_outcome(graph)
        elif parent.epoch is not None:
            # A worker owns the parent: the child gets an epoch of its own, taken only while
            # the parent's epoch is current, so a fenced-off parent's child is fenced too.
            # Child rows are never claimed on their own (claim skips parent_run_id rows).
            # Only seq 0 (RunStarted, from create) is written unfenced: it is a function of
            # the parent's node, and a second create of the same child is RunExists.
            epoch = await self.store.leases.adopt_child(
                run_id, self.owner, parent.graph.run_id, parent.epoch
            )
            outcome = await self.continue_graph(graph, epoch=epoch)
        elif fresh:
            outcome = await self.execute(graph, epoch=None)
        else:
            outcome = await self.continue_graph(graph)
        if outcome.status is Status.PAUSED:
            raise ChildPaused(run_id, outcome.reason)
        if outcome.status is Status.WAITING:
            # The parent parks too; an event for the child (its run id and key) queues the
            # parent, whose node then runs again and continues the child from its log.
            g = outcome.graph
            raise ChildWaiting(run_id, [w.key for w in g.pending_waits()], g.wake_at_us())
        if outcome.status is not Status.SUCCEEDED:
            raise ChildFailed(run_id, outcome.reason)
        g = outcome.graph
        return outcome.result, Usage(g.tokens_in, g.tokens_out, g.cost, g.model_calls)

    async def _settle_child_row(self, parent: RunExecutor, graph: Graph) -> None:
        """Give a finished child's row the status its log ends with, if it does not have it.

        A crash after the child's last record was appended and before its row was updated
        leaves the row `running`, owned by a dead process; nothing else ever revisits a
        child row, so the parent's node that reads the child back settles it. Under a
        worker, at a child epoch taken while the parent's epoch is current, as every other
        write of a child is.
        """
        info = await self.store.runs.get(graph.run_id)
        if info is None or info.status is graph.status:
            return
        epoch = None
        if parent.epoch is not None:
            epoch = await self.store.leases.adopt_child(
                graph.run_id, self.owner, parent.graph.run_id, parent.epoch
            )
        reason = graph.reason or None
        await self.store.runs.set_status(graph.run_id, graph.status, reason=reason, epoch=epoch)

    async def _read_outcome(self, graph: Graph) -> Outcome:
        status = graph.status
        result = None
        if graph.finished is not None and graph.finished.run_finished.HasField("result"):
            result = await self.new_codec().decode(graph.finished.run_finished.result)
        return Outcome(graph.run_id, status, result, graph.reason, graph)

    async def outcome(self, run_id: str) -> Outcome:
        """The state of a run as its log tells it, without executing anything."""
        return await self._read_outcome(await self.load(run_id))


def _taken_up_at(run_id: str, rows: Sequence[bytes]) -> int | None:
    """The epoch of the log's last RunResumed (None: none), read from the end."""
    for row in reversed(rows):
        (record,) = decode_log(run_id, [row])
        if record.HasField("run_resumed"):
            return record.run_resumed.epoch
    return None


def parse_config(raw: bytes) -> dict[str, Any]:
    """A RunStarted's config bytes as a dict."""
    return dict(json.loads(raw)) if raw else {}
