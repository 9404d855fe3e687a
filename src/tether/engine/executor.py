"""The executor: launch ready nodes, record each completion, launch what became ready."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

from tether.blobs import BlobError, BlobNotFound, BlobRef
from tether.engine.context import Context
from tether.engine.steps import STOPS_NODE
from tether.foundation import eager, logs
from tether.foundation.core import NOTHING_USED, Node, NodeResult, Sleep, Spawn, Wait, make_node
from tether.foundation.errors import (
    BadRunId,
    CannotContinue,
    ChildFailed,
    ChildPaused,
    ChildWaiting,
    InvalidSpawn,
    NodeTimeout,
    OutputNotSerializable,
    RecordTooLarge,
    RunMustPause,
    StoreError,
    StoreFull,
    TetherError,
    UnknownNodeKind,
    WaitCompleted,
)
from tether.foundation.ids import child_id
from tether.foundation.locks import HandoffLock
from tether.foundation.wakeup import Wakeup
from tether.model.graph import Graph, GraphError
from tether.model.records import (
    NodeSpec,
    Record,
    close_completed,
    encode,
    node_failed,
    now_us,
    open_completed,
    run_finished,
    run_paused,
    run_waiting,
)
from tether.model.values import LATER, pb_of
from tether.model.waits import check_payload, due_timeouts, event_record, find_wait, wait_spec
from tether.store.base import Status

if TYPE_CHECKING:
    from tether.engine.registry import HandlerSpec, Registry
    from tether.engine.runtime import Runtime

log = logging.getLogger("tether.engine.executor")

# Errors that no retry can fix.
# A bad sub-agent key (BadRunId) is as bad on every attempt.
_PERMANENT = (
    OutputNotSerializable,
    RecordTooLarge,
    InvalidSpawn,
    UnknownNodeKind,
    ChildFailed,
    BadRunId,
)

# Rounds of the loop without a suspension before it yields to the event loop once.
_YIELD_EVERY = 32


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an execution of a run ended."""

    run_id: str
    status: Status
    result: Any
    reason: str
    graph: Graph


class _Abandoned(Exception):
    """A node stopped unrecorded (drained during a retry back-off); it runs again on resume."""


class NotAccepting(Exception):
    """The executor stopped taking events (it is parking or pausing the run): deliver the
    event through the store once the run is released."""


# An event handed to the executing run: (key, payload, event_id, the future of its seq).
_Delivery = tuple[str, Any, str, "asyncio.Future[int | None]"]


class RunExecutor:
    """Executes one run's graph until it finishes, fails, pauses or is drained."""

    def __init__(
        self, runtime: Runtime, graph: Graph, registry: Registry, *, epoch: int | None = None
    ) -> None:
        self.runtime = runtime
        self.graph = graph
        self.registry = registry
        self.epoch = epoch
        self.codec = runtime.new_codec()
        self._failure: str | None = None
        self._pause: str | None = None
        # Failure records made and not yet seen recorded: only then does the loop look for
        # one in what it recorded (most batches hold none).
        self._unnoted = 0
        # A node this code cannot execute (a kind it lacks, or a sub-agent run it cannot
        # continue): nothing more is launched and the run is given back queued (invariant 10).
        self._give_back: CannotContinue | None = None
        # Nodes whose sub-agent run parked on its waits: this run parks with them.
        self._child_waits: dict[str, ChildWaiting] = {}
        # Set by Runtime.cancel: stop launching, cancel what is in flight, record CANCELLED.
        # A flag, not an Event: nothing waits on it (the loop is poked), and the loop reads
        # it twice a round.
        self.cancelling = False
        self.finished = asyncio.Event()
        # Events delivered to this run while it executes here; the loop records them.
        self.accepting = True
        self._inbox: list[_Delivery] = []
        # Node outcomes (records, or the exception), deliveries, drains and cancels wake the
        # loop through this.
        self._wakeup: Wakeup[tuple[str, list[tuple[Record, bytes]] | BaseException]] = Wakeup()
        # Journaled steps append from node tasks while the loop appends completions: one
        # append at a time, so each takes the graph's next seq (uncontended, it never waits).
        self.append_lock = HandoffLock()
        # The nodes in flight now, by node id (the loop's own; `in_flight` counts them).
        self._tasks: dict[str, asyncio.Task[None]] = {}
        # Kinds whose nodes made model calls in this run (turns): those in flight count
        # against the turn budget, as any node in flight counts against the node budget.
        self._turn_kinds: set[str] | None = None

    # -- the loop --------------------------------------------------------------

    def request_cancel(self) -> None:
        """Stop this run: in-flight nodes are cancelled unrecorded; it finishes CANCELLED."""
        self.cancelling = True
        self._wakeup.poke()

    def wake(self) -> None:
        """Make the loop look again at the runtime's drain (Runtime.drain calls it)."""
        self._wakeup.poke()

    async def deliver(self, key: str, payload: Any, event_id: str) -> int | None:
        """Record an event for wait `key` in this run's loop; return its seq once durable
        (None if this event was recorded before). NotAccepting once the loop has ended."""
        if not self.accepting:
            raise NotAccepting
        state = find_wait(self.graph, key, event_id)
        if state is None:
            return None
        check_payload(self.graph, state, payload)
        done: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self._inbox.append((key, payload, event_id, done))
        self._wakeup.poke()
        return await done

    async def execute(self) -> Outcome:
        self.runtime.executing[self.graph.run_id] = self
        bound = logs.bind_run(self.graph.run_id, self.runtime.owner, self.epoch)
        try:
            if self.runtime.keys is not None:  # write under the run's own key, if it has one
                self.codec = await self.runtime.codec_for(self.graph.run_id)
            return await self._execute()
        finally:
            logs.unbind_run(bound)
            self.accepting = False
            for *_, done in self._inbox:  # never recorded: the sender delivers it again
                if not done.done():
                    done.set_exception(NotAccepting())
            self._inbox.clear()
            self.runtime.executing.pop(self.graph.run_id, None)
            self.finished.set()

    async def _execute(self) -> Outcome:
        g, rt = self.graph, self.runtime
        queue: deque[str] = deque(g.ready)
        tasks = self._tasks
        wakeup = self._wakeup
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        unyielded = 0  # loop rounds since this task last gave the event loop a turn
        # The run's limits as last read (a RunResumed may replace them), and whether it
        # has any: a run without limits reads no clock and no field for them per round.
        limits, limited, counted = None, False, False
        try:
            while not self.cancelling:
                draining = rt.draining.is_set()
                stopping = draining or bool(self._failure or self._pause or self._give_back)
                if g.limits is not limits:
                    limits = g.limits
                    counted = bool(limits.max_nodes or limits.max_turns)
                    limited = counted or bool(
                        limits.max_tokens or limits.max_cost or limits.max_wall_ms
                    )
                if not stopping and limited:
                    self._pause = g.exhausted(now_us())
                    stopping = bool(self._pause)
                if not stopping and (self._inbox or g.open_waits):
                    queue.extend(await self._record_events())
                while queue and not stopping and len(tasks) < rt.concurrency:
                    if counted and not self._room(queue[0]):
                        break  # what is in flight may spend the rest: wait for it
                    nid = queue.popleft()
                    # Run up to its first suspension now: a handler that returns without
                    # awaiting anything has handed its outcome over when this returns.
                    tasks[nid] = eager.start(loop, self._node_task(nid))
                if not tasks:
                    if self._inbox and not stopping:
                        continue  # delivered while the last batch was being recorded
                    self.accepting = False
                    break
                if draining:  # (a drain during the launches above wakes the loop at once)
                    if deadline is None:
                        deadline = loop.time() + rt.grace
                    if rt.hurry.is_set():  # a second signal: the grace period ends now
                        deadline = loop.time()
                until = deadline
                if g.open_waits and not stopping and (wake_us := g.wake_at_us()):
                    # A wait's deadline passes while other nodes are in flight.
                    due = loop.time() + max(0.0, (wake_us - now_us()) / 1e6)
                    until = due if until is None else min(until, due)
                if not wakeup.outcomes and not self._inbox:
                    # Woken by a completion, a delivery, a drain, a cancel or `until`.
                    await wakeup.wait(until)
                    unyielded = 0
                elif (unyielded := unyielded + 1) >= _YIELD_EVERY:
                    # Nodes that never suspend (and a store that answers at once) would
                    # keep the loop to this run: let other tasks, signals and cancels in.
                    await asyncio.sleep(0)
                    unyielded = 0
                if self.cancelling:
                    # What completed meanwhile is dropped: a cancelled run records no more.
                    await self._wait_children_cancelled()
                    break
                done = wakeup.take()
                if not done and deadline is not None and loop.time() >= deadline:
                    log.warning(
                        "run %s: grace period over, cancelling %d nodes", g.run_id, len(tasks)
                    )
                    await _cancel_all(tasks)
                    break
                if not done:
                    continue
                batch: list[tuple[Record, bytes]] = []
                for nid, outcome in done:
                    del tasks[nid]
                    if type(outcome) is list:  # its records: the common outcome
                        batch += outcome
                    else:
                        batch += self._collect(nid, outcome)
                if batch:
                    lock = self.append_lock
                    if not lock.take_now():  # free, as nearly always: no coroutine
                        await lock.take()
                    try:
                        queue.extend(await rt.writer.commit(g, batch, epoch=self.epoch))
                    except StoreFull as exc:
                        # Nothing of the batch landed: its nodes run again on resume.
                        self._full(exc)
                        continue
                    finally:
                        lock.release()
                    if self._unnoted:  # a failure record is out: see if this batch holds it
                        self._note_failures(batch)
                    if self._turn_kinds is not None:  # else learned when first needed
                        self._learn_turns(batch)
        finally:
            self.accepting = False
            if tasks:  # an exception (fencing, cancellation) ends the loop: nothing more lands
                await _cancel_all(tasks)
        return await self._finish()

    @property
    def in_flight(self) -> int:
        """How many of this run's nodes are executing now."""
        return len(self._tasks)

    def _room(self, node_id: str) -> bool:
        """Whether launching `node_id` keeps the node and turn budgets even if every node
        in flight completes: nodes in flight count against what is left, so a budget of N
        nodes never completes more than N. Tokens and cost cannot be known ahead: they are
        checked between nodes, and nodes in flight may pass them."""
        g, lim, flying = self.graph, self.graph.limits, self._tasks.keys()
        if lim.max_nodes and g.completed_count + len(self._tasks) >= lim.max_nodes:
            return False
        if lim.max_turns:
            turns = self._turn_kinds_now()
            if g.spec(node_id).kind in turns:
                turns_in_flight = sum(1 for nid in flying if g.spec(nid).kind in turns)
                if g.model_calls + turns_in_flight >= lim.max_turns:
                    return False
        return True

    def _turn_kinds_now(self) -> set[str]:
        """The kinds that made model calls in this run, learned from its records."""
        if self._turn_kinds is None:
            nodes = self.graph.nodes
            self._turn_kinds = {
                nodes[nid].spec.kind
                for nid in self.graph.order
                if (nc := nodes[nid].completed) is not None and nc.used.model_calls
            }
        return self._turn_kinds

    def _learn_turns(self, batch: Sequence[tuple[Record, bytes]]) -> None:
        if self._turn_kinds is None:
            return  # learned from the graph when first needed
        for record, _ in batch:
            if record.HasField("node_completed") and record.node_completed.used.model_calls:
                self._turn_kinds.add(record.node_completed.kind)
            elif record.HasField("step_recorded") and record.step_recorded.used.model_calls:
                self._turn_kinds.add(self.graph.spec(record.step_recorded.node_id).kind)

    async def _record_events(self) -> list[str]:
        """Record the events delivered here and the waits whose deadline has passed, in one
        append; answer each sender; return the nodes that became ready."""
        g = self.graph
        inbox, self._inbox = self._inbox, []
        batch: list[tuple[Record, bytes]] = []
        answered: list[tuple[asyncio.Future[int | None], int | None]] = []
        # The waits this batch completes, with the event that completes each: the graph
        # learns of them only once the batch is applied, so each event is judged against
        # the graph as it will be after the events before it (invariant 1: recorded once).
        taken: dict[str, str] = {}
        for key, payload, event_id, done in inbox:
            try:  # judged again: an earlier event or a deadline may have completed it
                state = find_wait(g, key, event_id)
                if state is not None and (nid := state.spec.node_id) in taken:
                    if event_id and taken[nid] == event_id:
                        state = None  # a repeat of the event this batch records
                    else:
                        raise WaitCompleted(
                            g.run_id, key, "the wait was already completed by another event"
                        )
                if state is not None:
                    taken[state.spec.node_id] = event_id
                    value = await self.codec.encode(payload)
                    record = event_record(state, value, event_id)
                    data = encode(record)
                    self.runtime.check_record_size(g.run_id, state.spec.node_id, data)
                    g.check(record)
            except Exception as exc:
                done.set_exception(exc)
                continue
            if state is None:
                answered.append((done, None))
                continue
            answered.append((done, g.next_seq + len(batch)))
            batch.append((record, data))
        if g.open_waits:
            for record in due_timeouts(g, now_us()):
                if record.node_completed.node_id not in taken:
                    batch.append((record, encode(record)))
        ready: list[str] = []
        if batch:
            try:
                async with self.append_lock:
                    ready = await self.runtime.writer.commit(g, batch, epoch=self.epoch)
            except BaseException as exc:
                for done, _ in answered:
                    if not done.done():
                        done.set_exception(exc if isinstance(exc, Exception) else NotAccepting())
                if isinstance(exc, StoreFull):  # the senders are told; the run pauses
                    self._full(exc)
                    return []
                raise
        for done, seq in answered:
            if not done.done():
                done.set_result(seq)
        return ready

    async def _wait_children_cancelled(self) -> None:
        """Let sub-agent runs here (cancelled along with this one) record their own finish.

        Cancelling the node that waits for a child would interrupt the child mid-append;
        the child instead stops on its own cancel flag, and its node then ends by itself.
        """
        prefix = f"{self.graph.run_id}."
        children = [ex for rid, ex in self.runtime.executing.items() if rid.startswith(prefix)]
        if children:
            waits = [asyncio.ensure_future(ex.finished.wait()) for ex in children]
            try:
                await asyncio.wait(waits, timeout=self.runtime.grace)
            finally:
                for w in waits:
                    w.cancel()

    async def record_step(self, record: Record, data: bytes) -> None:
        """Append a journaled step's record (checked here, encoded by the caller)."""
        async with self.append_lock:
            try:
                self.graph.check(record)
            except GraphError as exc:
                raise InvalidSpawn(f"run {self.graph.run_id}: a step record {exc}") from None
            await self.runtime.writer.commit(self.graph, [(record, data)], epoch=self.epoch)
        self._learn_turns([(record, data)])

    def _collect(
        self, node_id: str, outcome: list[tuple[Record, bytes]] | BaseException
    ) -> list[tuple[Record, bytes]]:
        if not isinstance(outcome, BaseException):
            return outcome
        exc = outcome
        if isinstance(exc, CannotContinue):
            # Unrecorded; what else is in flight still records, then the run is given back.
            self._give_back = self._give_back or exc
            return []
        if isinstance(exc, RunMustPause):
            # A step that does not match its record, or a budget spent between steps: the
            # node stays unrecorded and the run pauses with the reason.
            self._pause = self._pause or str(exc)
            return []
        if isinstance(exc, ChildWaiting) and not self.runtime.draining.is_set():
            self._child_waits[node_id] = exc
            return []
        if isinstance(exc, ChildPaused):
            # A child drained along with this run is not a reason of its own: the run
            # pauses for the drain and stays runnable.
            if not self.runtime.draining.is_set():
                self._pause = self._pause or str(exc)
            return []
        if isinstance(exc, _Abandoned):
            return []
        if isinstance(exc, StoreFull):  # a journaled step's record found no space
            self._full(exc)
            return []
        if isinstance(exc, BlobError):
            # A recorded value cannot be read, or a blob cannot be written: the node stays
            # unrecorded and the run pauses, to resume once the blob store is repaired.
            self._pause = self._pause or f"node {node_id}: {type(exc).__name__}: {exc}"
            return []
        raise exc

    def _full(self, exc: StoreFull) -> None:
        """The store has no space left: launch nothing more, pause the run with why."""
        if self._pause is None:
            log.warning("run %s: %s; pausing", self.graph.run_id, exc)
            self._pause = str(exc)

    def _note_failures(self, batch: list[tuple[Record, bytes]]) -> None:
        """After a batch is recorded: a node that failed for good fails the run."""
        g = self.graph
        for record, _ in batch:
            if record.HasField("node_failed"):
                self._unnoted -= 1
                nf = record.node_failed
                # A fallback's record follows the failure in the same batch and rescues it.
                if g.completed(nf.node_id) is None and self._failure is None:
                    self._failure = (
                        f"node {nf.node_id} ({nf.kind}) failed after {nf.attempt} attempt(s): "
                        f"{nf.error_type}: {nf.message}"
                    )

    async def _finish(self) -> Outcome:
        g, rt = self.graph, self.runtime
        result: Any = None
        if self.cancelling:
            status = Status.CANCELLED
            record = run_finished(status, error="cancelled by request")
        elif self._failure:
            status = Status.FAILED
            record = run_finished(status, error=self._failure)
        elif self._give_back is not None:
            await self._hand_back(self._give_back)
            raise self._give_back
        elif g.pending == 0:
            status = Status.SUCCEEDED
            out = g.completed(g.result_node) if g.result_node is not None else None
            record = run_finished(status, result=out.output if out is not None else None)
        elif rt.draining.is_set() or self._pause:
            status = Status.PAUSED
            reason = "drain" if rt.draining.is_set() and not self._pause else self._pause or "drain"
            record = run_paused(reason)
        elif g.open_waits or self._child_waits:
            # Parked: the run is a row with a wake-up time until an event or a deadline,
            # its own or its sub-agent runs' (keys `child_run_id/key`).
            status = Status.WAITING
            keys = [w.key for w in g.pending_waits()]
            wakes = [g.wake_at_us()]
            for child in self._child_waits.values():
                keys += [f"{child.run_id}/{key}" for key in child.keys]
                wakes.append(child.wake_at_us)
            record = run_waiting(keys, min((w for w in wakes if w), default=0))
        else:
            status = Status.FAILED
            stuck = [n for n, s in g.nodes.items() if s.completed is None][:5]
            record = run_finished(
                status, error=f"stuck: nodes {stuck} wait for parents that can never be recorded"
            )
        # The record, the row's status and the lease's release in one transaction.
        async with self.append_lock:  # a shielded step append may still be landing
            try:
                await rt.writer.finish(g, record, epoch=self.epoch)
            except StoreFull as exc:
                # Not even the last record fits: the run is paused by its row alone (an
                # update in place), its log as it was; a resume continues it from there.
                reason = self._pause if self._pause and "no space left" in self._pause else str(exc)
                await self._pause_unrecorded(reason)
                return Outcome(g.run_id, Status.PAUSED, None, reason, g)
        if status is Status.SUCCEEDED and g.result_node is not None:
            # Read after the finish is recorded: an unreadable result blob loses nothing.
            out = g.completed(g.result_node)
            assert out is not None
            result = await self.codec.decode_cached(g.result_node, out.output)
        return Outcome(g.run_id, status, result, g.reason, g)

    async def _pause_unrecorded(self, reason: str) -> None:
        """Release the run paused with `reason`, recording nothing (no space for a record)."""
        g, rt = self.graph, self.runtime
        try:
            if self.epoch is not None:
                await rt.keeper.release(g.run_id, self.epoch, Status.PAUSED, reason)
            else:
                await rt.store.runs.set_status(g.run_id, Status.PAUSED, reason=reason)
        except StoreError as exc:  # its lease runs out; whoever takes it pauses it again
            log.warning("run %s: could not mark it paused either (%s)", g.run_id, exc)
        log.warning("run %s: paused unrecorded: %s", g.run_id, reason)

    async def _hand_back(self, exc: CannotContinue) -> None:
        """Give the run back queued with why, recording nothing: code that can continue it
        (another release, or this one fixed) takes it."""
        g, rt = self.graph, self.runtime
        reason = f"{exc.why} ({rt.owner}); waiting for a worker that can continue it"
        if self.epoch is not None:
            await rt.keeper.release(g.run_id, self.epoch, Status.QUEUED, reason)
        else:
            await rt.store.runs.set_status(g.run_id, Status.QUEUED, reason=reason)
        log.warning("run %s: %s; given back queued", g.run_id, exc.why)

    # -- one node --------------------------------------------------------------

    async def _node_task(self, node_id: str) -> None:
        """A node's task: run it, hand its records (or what it raised) to the loop. One
        coroutine a node: its attempts are written here, not awaited in another."""
        outcome: list[tuple[Record, bytes]] | BaseException
        try:
            logs.NODE_ID.set(node_id)  # this node's own task: its log lines name it
            spec = self.graph.spec(node_id)
            kind = spec.kind  # (each read of a field builds its value again)
            try:
                handler = self.registry.get(kind)
            except UnknownNodeKind:
                # Spawned by a handler of this code, or pending from an older release: not the
                # run's failure. Invariant 10: the run is given back for code that has the kind.
                g = self.graph
                raise CannotContinue(
                    g.run_id,
                    g.agent,
                    f"agent {g.agent!r} here has no handler for node kind {kind!r} "
                    f"(node {node_id})",
                    (kind,),
                ) from None
            node_input = self.codec.decode_now(spec.input)
            if node_input is LATER:
                node_input = await self.codec.decode(spec.input)
            events = self.runtime.events
            if events.event_listeners:  # no event built for nobody: this runs for every node
                events.emit(self.graph.run_id, node_id, {"type": "node_started", "kind": kind})
            parents = self.graph.parents_of(node_id, spec)
            # A retried run's failed node: its attempts are numbered after its last recorded
            # one, and it gets its retry policy's attempts again.
            attempt = self.graph.last_attempt(node_id)
            while True:
                attempt += 1
                node = make_node(node_id, kind, parents, node_input, attempt)
                ctx = Context(self, node)
                started_us, t0 = now_us(), time.perf_counter()
                try:
                    if handler.timeout is None:
                        out = await handler.fn(ctx, node)
                    else:
                        out = await _call_timed(handler, ctx, node)
                    if ctx.journal is not None:
                        ctx.journal.check_done()
                    outcome = [await self._completed_record(ctx, out, attempt, started_us, t0)]
                    break
                except STOPS_NODE:  # pause, or fenced off: record nothing
                    raise
                except Exception as exc:
                    failed = await self._after_failure(spec, handler, ctx, exc, started_us, t0)
                    if failed is None:
                        continue  # retried, after its back-off
                    outcome = failed
                    break
        except asyncio.CancelledError:
            raise  # cancelled by the loop itself, which no longer waits for it
        except BaseException as exc:  # the loop judges it (pause, fail, or raise)
            outcome = exc
        self._wakeup.finished((node_id, outcome))

    async def _after_failure(
        self,
        spec: NodeSpec,
        handler: HandlerSpec,
        ctx: Context,
        exc: Exception,
        started_us: int,
        t0: float,
    ) -> list[tuple[Record, bytes]] | None:
        """What an attempt that raised `exc` records: None to try again (after the back-off),
        else its failure, with its fallback's record if the handler has one that returns."""
        node, run_id = ctx.node, self.graph.run_id
        # This node's attempts since the run's last retry (all of them, if never retried).
        attempt = node.attempt - self.graph.last_attempt(node.node_id)
        if isinstance(exc, ExceptionGroup):
            # A handler's task group (a framework running tools at once) wraps a step's
            # pause or fence: unwrap it, so the run pauses instead of failing.
            stop = _first_stop(exc)
            if stop is not None:
                raise stop from exc
        retryable = isinstance(exc, handler.retry.retry_on) and not isinstance(exc, _PERMANENT)
        if retryable and attempt < handler.retry.attempts:
            log.info(
                "run %s node %s attempt %d failed: %r", run_id, node.node_id, node.attempt, exc
            )
            await self._backoff(handler.retry.delay(attempt))
            return None
        failed = self._failed_record(spec, exc, node.attempt, retryable=retryable)
        if handler.fallback is None:
            return [failed]
        try:
            out = await handler.fallback(ctx, node, exc)
            done = await self._completed_record(
                ctx, out, node.attempt, started_us, t0, fallback=True
            )
        except STOPS_NODE:
            raise
        except Exception as fb_exc:
            log.warning("run %s node %s fallback failed: %r", run_id, node.node_id, fb_exc)
            return [failed]
        return [failed, done]

    async def _backoff(self, delay: float) -> None:
        drain = self.runtime.draining
        if drain.is_set():
            raise _Abandoned
        try:
            await asyncio.wait_for(drain.wait(), timeout=delay)
        except TimeoutError:
            return
        raise _Abandoned

    async def _completed_record(
        self,
        ctx: Context,
        out: Any,
        attempt: int,
        started_us: int,
        t0: float,
        *,
        fallback: bool = False,
    ) -> tuple[Record, bytes]:
        result = out if isinstance(out, NodeResult) else NodeResult(output=out)
        usage = ctx.usage + result.usage if result.usage else ctx.usage
        wall_ms = int((time.perf_counter() - t0) * 1000)
        # The record is filled in place: what it used, its output and its successors.
        node = ctx.node
        record = open_completed(node.node_id, node.kind)
        nc = record.node_completed
        counted = usage is not NOTHING_USED and (
            usage.tokens_in or usage.tokens_out or usage.cost or usage.model_calls
        )
        if wall_ms or counted or ctx.rate_wait_s:
            # (a node that used nothing stores no `used`: its zeros are not set)
            used = nc.used
            used.wall_ms = wall_ms
            used.tokens_in = usage.tokens_in
            used.tokens_out = usage.tokens_out
            used.cost = usage.cost
            used.model_calls = usage.model_calls
            used.rate_wait_ms = round(ctx.rate_wait_s * 1000)
        if (data := self.codec.encode_into(nc.output, result.output)) is not None:
            nc.output.CopyFrom(await self.codec.offload(data))
        plain: str | None = None  # the one plain successor, if that is all it spawned
        if spawns := result.spawn:
            if len(spawns) == 1 and type(one := spawns[0]) is Spawn and one.after is None:
                # The common successor (a chain's next step, an agent's next turn), here
                # rather than in `_specs`: no coroutine, no keys to compare, no joins to
                # resolve. Slim: the one parent, this node, is left out (Graph.parents_of).
                key = one.key if one.key is not None else "0"
                plain = child_id(node.node_id, key)
                succ = nc.spawned.add()  # (fields set one by one: keywords cost more)
                succ.node_id = plain
                succ.kind = one.kind
                if (data := self.codec.encode_into(succ.input, one.input)) is not None:
                    succ.input.CopyFrom(await self.codec.offload(data))
            else:
                await self._specs(node.node_id, spawns, nc.spawned)
        refs = await self._blob_refs(ctx, result.blobs) if ctx.attachments or result.blobs else ()
        close_completed(
            nc,
            blobs=[pb_of(ref) for ref in refs] if refs else (),
            attempt=attempt,
            started_at_us=started_us,
            is_result=result.is_result,
            fallback=fallback,
        )
        try:
            if spawns and plain is None:
                self.graph.check(record)
            else:  # what it spawned is known here: not read back from the record
                self.graph.check_plain(nc, plain, node.node_id)
        except GraphError as exc:
            raise InvalidSpawn(f"node {node.node_id} {exc}") from None
        data = encode(record)
        if len(data) > self.runtime.record_cap:
            raise RecordTooLarge(
                self.graph.run_id, node.node_id, len(data), self.runtime.record_cap
            )
        return record, data

    async def _blob_refs(self, ctx: Context, returned: Sequence[BlobRef]) -> list[BlobRef]:
        """The node's attachments plus the refs it returned, each once, all in our store."""
        refs = list(dict.fromkeys(ctx.attachments))
        listed = set(refs)
        for ref in returned:
            if ref in listed:
                continue
            # Not put by this attempt: check it is ours and stored, so the record never
            # points to a foreign ref (BlobRefRefused) or to missing bytes.
            if not await ctx.blobs.exists(ref):
                raise BlobNotFound(
                    f"node {ctx.node_id} returned blob {ref.url}, which is not stored"
                )
            listed.add(ref)
            refs.append(ref)
        return refs

    async def _specs(
        self,
        node_id: str,
        spawns: Sequence[Spawn | Wait | Sleep],
        specs: RepeatedCompositeFieldContainer[NodeSpec],
    ) -> None:
        """Add the specs of the successors a node spawned to its record's `specs` (the one
        common successor is added by `_completed_record`)."""
        codec = self.codec
        keys = [s.key if s.key is not None else str(i) for i, s in enumerate(spawns)]
        if len(set(keys)) != len(keys):
            raise InvalidSpawn(f"node {node_id} spawned two successors with the same key: {keys}")
        known = set(keys)
        for key, s in zip(keys, spawns, strict=True):
            if s.after is None:
                parents = []  # slim: the one parent, `node_id`, is left out
            else:
                missing = [a for a in s.after if a not in known]
                if missing or not s.after:
                    raise InvalidSpawn(
                        f"node {node_id}: successor {key!r} joins on unknown keys {missing}"
                    )
                parents = [child_id(node_id, a) for a in s.after]
            if isinstance(s, Spawn):
                spec = specs.add(node_id=child_id(node_id, key), kind=s.kind, parent_ids=parents)
                if (data := codec.encode_into(spec.input, s.input)) is not None:
                    spec.input.CopyFrom(await codec.offload(data))
            else:
                specs.append(await wait_spec(node_id, s, parents, codec, now_us()))

    def _failed_record(
        self, spec: NodeSpec, exc: BaseException, attempt: int, *, retryable: bool
    ) -> tuple[Record, bytes]:
        record = node_failed(spec, exc, attempt, retryable=retryable)
        self._unnoted += 1  # until the loop has recorded it (`_note_failures`)
        return record, encode(record)


def wake_at_of(graph: Graph) -> float | None:
    """When a parked run must be woken for its earliest deadline (seconds since the epoch)."""
    wake_us = graph.wake_at_us()
    return wake_us / 1e6 if wake_us else None


async def _call_timed(handler: HandlerSpec, ctx: Context, node: Node) -> Any:
    """The handler under its timeout (NodeTimeout once it has passed)."""
    try:
        async with asyncio.timeout(handler.timeout) as cm:
            return await handler.fn(ctx, node)
    except TimeoutError:
        if cm.expired():
            raise NodeTimeout(
                f"handler for {node.kind!r} timed out after {handler.timeout:g}s"
            ) from None
        raise


def _first_stop(group: BaseExceptionGroup[Any]) -> BaseException | None:
    """The first pause or fence in a (nested) exception group, if any."""
    for exc in group.exceptions:
        if isinstance(exc, STOPS_NODE):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = _first_stop(exc)
            if found is not None:
                return found
    return None


async def _cancel_all(tasks: dict[str, asyncio.Task[None]]) -> None:
    for task in tasks.values():
        task.cancel()
    await asyncio.gather(*tasks.values(), return_exceptions=True)
    tasks.clear()


__all__ = ["Outcome", "RunExecutor", "TetherError"]
