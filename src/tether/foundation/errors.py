"""tether's exceptions: each message names what failed and what to do."""

from __future__ import annotations


class TetherError(Exception):
    """Base of every tether error."""


class StoreError(TetherError):
    """A log or run store operation failed."""


class StoreNotReady(StoreError):
    """A read-only command found no store (or an un-migrated one) where it looked."""


class StoreUnavailable(StoreError):
    """The database could not be reached; the operation may be retried."""


class StoreFull(StoreError):
    """The store has no space left for a write (SQLITE_FULL, PostgreSQL's disk_full): nothing
    of that write landed, and what was recorded before is intact. Runs pause; once space
    is freed, `tether resume` continues them."""

    def __init__(self, store: str, detail: str) -> None:
        super().__init__(
            f"store {store}: no space left ({detail}); free space, then resume the paused runs"
        )
        self.store = store
        self.detail = detail


class ConflictingRecord(StoreError):
    """A different record already exists at this (run_id, seq)."""

    def __init__(self, run_id: str, seq: int) -> None:
        super().__init__(
            f"run {run_id}: a different record already exists at seq {seq}; "
            "the log is append-only and a seq is written once"
        )
        self.run_id = run_id
        self.seq = seq


class StaleEpoch(StoreError):
    """An append was fenced off: another owner holds the run now."""

    def __init__(self, run_id: str, epoch: int) -> None:
        super().__init__(
            f"run {run_id}: write rejected, epoch {epoch} is stale "
            "(another worker has claimed the run); stopping work on it"
        )
        self.run_id = run_id
        self.epoch = epoch


class LogGap(StoreError):
    """An owner's append does not follow the log's last record: the log lost its tail
    (a failover to an asynchronous standby), so the writer's view of the run is stale.
    Nothing was written; the run is reloaded from what its log holds and continued."""

    def __init__(self, run_id: str, seq: int, last_seq: int) -> None:
        super().__init__(
            f"run {run_id}: append at seq {seq} refused, the log's last record is at seq "
            f"{last_seq} (it lost records this writer had appended, or never had them); "
            "reload the run from its log"
        )
        self.run_id = run_id
        self.seq = seq
        self.last_seq = last_seq


class LeaseLost(StaleEpoch):
    """This process's lease on a run ended while it executed the run: another owner took
    it over at a newer epoch, or it ran out unrenewed. Its handlers here were stopped."""

    def __init__(self, run_id: str, epoch: int, why: str) -> None:
        how = (
            "taken over at a newer epoch"
            if why == "lost"
            else "ran out unrenewed (the store was unreachable)"
        )
        StoreError.__init__(
            self, f"run {run_id}: lease {how}; stopped its work here at epoch {epoch}"
        )
        self.run_id = run_id
        self.epoch = epoch
        self.why = why


class UnknownRun(TetherError):
    """No run with this id exists in the store."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"unknown run {run_id!r}: no such run in this store")
        self.run_id = run_id


class RunBusy(TetherError):
    """The run has a live owner (a lease that has not run out), so it cannot be taken now."""

    def __init__(
        self,
        message: str,
        *,
        run_id: str | None = None,
        owner: str | None = None,
        lease_left: float | None = None,
    ) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.owner = owner
        # Seconds left on the owner's lease by the store's clock (None: not leased).
        self.lease_left = lease_left


class BadInput(TetherError):
    """A run's input does not fit the shape its agent declares (nothing was recorded)."""

    def __init__(self, agent: str, problem: str) -> None:
        super().__init__(f"agent {agent!r}: bad input: {problem}")
        self.agent = agent
        self.problem = problem


class BadRunId(TetherError):
    """A run id given by a caller is empty, too long, or uses characters outside the set."""


class RunExists(TetherError):
    """A run with this id already exists."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} already exists")
        self.run_id = run_id


class CorruptRecord(TetherError):
    """A stored record cannot be decoded or does not fit the run's graph."""

    def __init__(self, run_id: str, seq: int, why: str) -> None:
        super().__init__(f"run {run_id}: record at seq {seq} {why}")
        self.run_id = run_id
        self.seq = seq


class UnknownNodeKind(TetherError):
    """No handler is registered for a node kind."""

    def __init__(self, agent: str, kind: str) -> None:
        super().__init__(f"agent {agent!r} has no handler for node kind {kind!r}")
        self.kind = kind


class CannotContinue(TetherError):
    """This process's code cannot continue a run: its agent does not resolve here, or has no
    handler for a kind the run has pending. Nothing is recorded; the run stays queued for
    a worker whose code can (a deploy in progress is not a failure of the run)."""

    def __init__(self, run_id: str, agent: str, why: str, kinds: tuple[str, ...] = ()) -> None:
        super().__init__(f"run {run_id}: {why}")
        self.run_id = run_id
        self.agent = agent
        self.why = why
        self.kinds = kinds


class UnknownAgent(TetherError):
    """An agent name or import path does not resolve to a Registry."""


class RecordTooLarge(TetherError):
    """An encoded record is over the hard cap."""

    def __init__(self, run_id: str, node_id: str, size: int, cap: int) -> None:
        super().__init__(
            f"run {run_id}: the record of node {node_id} is {size} bytes, over the "
            f"{cap}-byte cap; keep bytes in a blob: configure a blob store (Runtime(blobs=...), "
            "TETHER_BLOB_URL or --blobs) so large values are offloaded, or store files with "
            "ctx.attach"
        )
        self.size = size
        self.cap = cap


class OutputNotSerializable(TetherError):
    """A handler returned an output that cannot be encoded as JSON."""


class InvalidSpawn(TetherError):
    """A handler asked for successors that do not form a valid graph."""


class NodeTimeout(TetherError):
    """A handler ran past its kind's timeout."""


class ChildPaused(TetherError):
    """A sub-agent run paused, so the node that waits for it cannot complete now."""

    def __init__(self, run_id: str, reason: str) -> None:
        super().__init__(f"sub-agent run {run_id} paused: {reason}")
        self.run_id = run_id
        self.reason = reason


class ChildWaiting(ChildPaused):
    """A sub-agent run parked on its waits: the node that runs it waits with it."""

    def __init__(self, run_id: str, keys: list[str], wake_at_us: int) -> None:
        super().__init__(run_id, f"waiting for {', '.join(keys)}")
        self.keys = keys
        self.wake_at_us = wake_at_us


class ChildFailed(TetherError):
    """A sub-agent run finished without succeeding."""

    def __init__(self, run_id: str, reason: str) -> None:
        super().__init__(f"sub-agent run {run_id} failed: {reason}")
        self.run_id = run_id


class RunNotResumable(TetherError):
    """The run has finished, so it cannot be resumed."""


class RunNotRetryable(TetherError):
    """Only a failed run can be retried: this one is running, paused, waiting, queued,
    succeeded or cancelled (or is a sub-agent run, retried with its parent)."""


class RunMustPause(TetherError):
    """A node cannot go on now and must not be recorded: the run pauses with this reason."""


class ModelUnavailable(RunMustPause):
    """The provider kept failing with transient errors (connection refused, timeout, 5xx, 429)
    until the attempts ran out: the run pauses with this reason, unrecorded, and `tether
    resume` continues it once the model answers again."""

    def __init__(self, model: str, cause: str, attempts: int, *, verb: str = "unreachable"):
        super().__init__(
            f"model {model} {verb} ({cause}) after {attempts} attempt(s); "
            "resume the run once it answers again"
        )
        self.model = model
        self.cause = cause
        self.attempts = attempts


class ModelNotConfigured(RunMustPause):
    """A model that cannot be called as configured: an unknown provider, no API key, a key
    the provider refuses (401/403), a model or endpoint it does not know (404). Raised before
    a run is recorded when it can be; mid-run (a key rotated away) the run pauses with it.
    `variable` names the environment variable to set, if one would fix it."""

    def __init__(self, model: str, problem: str, *, variable: str | None = None) -> None:
        super().__init__(f"model {model}: {problem}")
        self.model = model
        self.problem = problem
        self.variable = variable


class NonDeterministicStep(RunMustPause):
    """A node's handler asked for a different step than the one recorded at that position.

    The handler's code changed since the steps were recorded (or it is not deterministic):
    the run pauses, nothing is recorded, and it can resume once the code matches again.
    """

    def __init__(self, run_id: str, node_id: str, index: int, recorded: str, asked: str) -> None:
        super().__init__(
            f"run {run_id} node {node_id}: non-deterministic step {index}: the log recorded "
            f"step {recorded!r} at this position, the handler now asks for {asked!r}; deploy "
            "the code that recorded the run to resume it, or start a new run"
        )
        self.run_id = run_id
        self.node_id = node_id
        self.index = index
        self.recorded = recorded
        self.asked = asked


class StepBudgetExhausted(RunMustPause):
    """A budget ran out between two journaled steps of a node."""


class StepTimeout(TetherError):
    """A journaled step ran past its timeout."""


class InvalidDuration(TetherError, ValueError):
    """A duration such as `30d` or `12h` could not be read."""

    def __init__(self, text: str) -> None:
        super().__init__(
            f"duration {text!r} is not valid: use a number and a unit, e.g. 90s, 30m, 12h, 30d, 2w"
        )
        self.text = text


class RunIsLive(TetherError):
    """A run (or one of its sub-agent runs) is not finished, so it may not be deleted."""

    def __init__(self, run_id: str, live_run_id: str, status: str) -> None:
        which = "it is" if live_run_id == run_id else f"its sub-agent run {live_run_id!r} is"
        super().__init__(
            f"run {run_id!r} was not deleted: {which} {status}; cancel it or wait until it finishes"
        )
        self.run_id = run_id


class CannotShred(TetherError):
    """A run asked to be shredded has no data key of its own; nothing was deleted."""

    status = 409

    def __init__(self, run_id: str) -> None:
        super().__init__(
            f"run {run_id!r} was not deleted: it has no data key of its own (it was written "
            "without per_run_keys / TETHER_PER_RUN_KEYS=1, or without a key ring), so "
            "shredding could not make copies of it unreadable; `tether runs delete` without "
            "--shred deletes it"
        )
        self.run_id = run_id


class ParentIsLive(RunIsLive):
    """A sub-agent run whose parent (or a run above it) has not finished: deleting it would
    take from the parent's tree a run it may still read back."""

    def __init__(self, run_id: str, parent_run_id: str, status: str) -> None:
        TetherError.__init__(
            self,
            f"run {run_id!r} was not deleted: it is a sub-agent run of {parent_run_id!r}, "
            f"which is {status}; delete {parent_run_id!r} once it has finished (its "
            "sub-agent runs go with it)",
        )
        self.run_id = run_id
        self.parent_run_id = parent_run_id


class EventRefused(TetherError):
    """An event cannot be delivered; nothing was recorded. `status` is the HTTP answer."""

    status = 409

    def __init__(self, run_id: str, key: str, why: str) -> None:
        super().__init__(f"run {run_id}: event for wait {key!r} refused: {why}")
        self.run_id = run_id
        self.key = key


class UnknownWait(EventRefused):
    """The run has no wait with this key (events are never buffered for a later wait)."""

    status = 404


class WaitCompleted(EventRefused):
    """The wait was completed already, by another event or by its deadline."""


class BadEventPayload(EventRefused):
    """The payload does not fit the wait's declared schema, or is not JSON."""

    status = 422


class RunHeldElsewhere(TetherError):
    """The run is held by another process that did not let it go in time; retry later."""

    def __init__(self, run_id: str, waited_s: float) -> None:
        super().__init__(
            f"run {run_id} is executing in another process and did not park within "
            f"{waited_s:g}s; nothing was recorded, deliver the event again later"
        )
        self.run_id = run_id


class KeyRingError(TetherError):
    """The encryption key ring is missing, malformed, or lacks a key that sealed data."""


class BadFork(TetherError, ValueError):
    """A fork was asked at a point, or with an override, that the source run does not have."""


class BadBudget(TetherError, ValueError):
    """A budget spec (`--budget nodes=8,cost=+0.5`) that cannot be read."""


class BudgetSpent(TetherError):
    """A run paused by its budget would pause again at once: resume it with a larger one."""

    def __init__(self, run_id: str, why: str, key: str, field: str) -> None:
        super().__init__(
            f"run {run_id} is paused by its budget ({why.removeprefix('budget: ')}) and "
            f"would pause again at once: raise its {key} limit (CLI: --budget {key}=+N, "
            f"N more than used so far; API: budget.{field})"
        )
        self.run_id = run_id
        self.key = key


class BadRateLimit(TetherError, ValueError):
    """A model rate limit with no rate, a rate of 0 or less, or a bad window (nothing stored)."""


class BadLimit(TetherError, ValueError):
    """A concurrency limit below 1, with both a key and --each-key, or a bad concurrency key
    or priority (nothing stored)."""


class UnknownLimit(TetherError, LookupError):
    """No concurrency limit of that scope is stored (nothing removed)."""


class BadSchedule(TetherError, ValueError):
    """A schedule with a bad name, cron expression, time zone, catch-up policy or input."""


class ScheduleExists(TetherError):
    """A schedule with this name exists already (remove it first)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"schedule {name!r} exists already; `tether schedule remove {name}` first")
        self.name = name


class UnknownSchedule(TetherError):
    """No schedule with this name exists."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no schedule named {name!r} (`tether schedule list` shows them)")
        self.name = name


class UnknownSeq(TetherError, ValueError):
    """A run was asked for at a seq it does not have (`show --at`, `?at=`)."""

    def __init__(self, run_id: str, seq: int, last: int) -> None:
        super().__init__(f"run {run_id} has seqs 0..{last}; there is no seq {seq}")
        self.run_id = run_id
        self.seq = seq


class BadTlog(TetherError, ValueError):
    """An exported run file (`.tlog`) that cannot be imported: truncated, damaged, from a
    newer format, or holding a blob whose bytes do not match their hash (nothing imported)."""

    def __init__(self, source: str, why: str) -> None:
        super().__init__(f"{source}: not imported: {why}")
        self.source = source
        self.why = why


class ImportConflict(TetherError):
    """A store holds a different run under an id that an imported file uses (nothing imported)."""

    def __init__(self, run_id: str, why: str) -> None:
        super().__init__(
            f"run {run_id!r}: this store holds a different run under that id ({why}); "
            "nothing imported: import into another store, or delete that run first"
        )
        self.run_id = run_id


class CannotExport(TetherError, ValueError):
    """A run that cannot be exported as asked: a sub-agent run (export its parent), or
    blobs sealed under a key ring with the blobs asked for."""
