"""The store interfaces: an append-only log of records and a table of runs."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from tether.foundation.status import Status as Status  # re-exported: stores speak of run status

if TYPE_CHECKING:
    from tether.store.forks import ForkTable
    from tether.store.keys import RunKeys
    from tether.store.limits import ConcurrencyLimits
    from tether.store.rates import RateLimits
    from tether.store.retention import Retention
    from tether.store.schedules import Schedules
    from tether.store.workers import Workers

# The reason of a run paused by a drain (SIGTERM): such a run is runnable again at once,
# unlike one paused for its budget, which waits for an explicit resume.
DRAIN = "drain"
# How views call a running run whose owner's lease ran out.
ORPHANED = "orphaned"


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which runs a listing shows beyond their status; the default shows every run."""

    agent: str | None = None
    run_id_prefix: str | None = None  # a search by id; a run's sub-agent runs share it
    parent_run_id: str | None = None  # only the sub-agent runs of this run
    top_level: bool = False  # only runs that are not sub-agent runs
    # True: only running runs whose owner's lease ran out (orphaned); False: all but those.
    orphaned: bool | None = None

    @property
    def everything(self) -> bool:
        return self == EVERY_RUN


EVERY_RUN = RunFilter()
# What a listing may be asked for by state, as views show it (`RunInfo.state`).
STATES = (*(s.value for s in Status), ORPHANED)


def state_filter(state: str, where: RunFilter = EVERY_RUN) -> tuple[Status, RunFilter]:
    """The status and filter that list the runs in `state` as views show it: `orphaned`
    is a running run whose lease ran out, so `running` leaves those out. ValueError
    naming the states for anything else."""
    if state not in STATES:
        raise ValueError(f"unknown status {state!r}: one of {', '.join(STATES)}")
    if state == ORPHANED:
        return Status.RUNNING, replace(where, orphaned=True)
    if state == Status.RUNNING.value:
        return Status.RUNNING, replace(where, orphaned=False)
    return Status(state), where


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One row of the runs table."""

    run_id: str
    agent: str
    status: Status
    parent_run_id: str | None = None
    reason: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    owner: str | None = None
    epoch: int = 0
    lease_until: float | None = None
    # The version of its agent's code the run is on (None: a run older than versions).
    agent_version: str | None = None
    # Flow control (tether.store.limits): the run's concurrency key (a tenant, a user; None:
    # none) and its priority (higher is claimed first).
    key: str | None = None
    priority: int = 0

    def lease_left(self, now: float) -> float | None:
        """Seconds left on the owner's lease at `now` (the store's clock); None: no lease."""
        return None if self.lease_until is None else self.lease_until - now

    def state(self, now: float) -> str:
        """The status as views show it: `orphaned` is running under a lease that ran out
        (its owner died or lost the store); a worker adopts it, `tether resume` takes it."""
        left = self.lease_left(now)
        if self.status is Status.RUNNING and left is not None and left < 0:
            return ORPHANED
        return self.status.value


class LogStore(ABC):
    """The append-only run log: `run_log(run_id, seq, record)`."""

    @abstractmethod
    async def append(
        self, run_id: str, entries: Sequence[tuple[int, bytes]], *, epoch: int | None = None
    ) -> None:
        """Durably append records at the given seqs, all or none, before returning.

        A record identical to the one already at its seq is a no-op; a different one
        raises ConflictingRecord. With `epoch`, the append is rejected with StaleEpoch
        in the same statement when the run's epoch has moved on. A backend inserts what
        it can and leaves that decision to `tether.store.judgement.judge_append`.
        """

    @abstractmethod
    async def read(self, run_id: str, *, after_seq: int = -1) -> list[tuple[int, bytes]]:
        """Return the run's records with seq > after_seq, in seq order; a fork's include
        the rows it references (`tether.store.forks`)."""

    async def read_all(self, run_id: str) -> list[bytes]:
        """Return the run's record bytes in seq order (the rehydration path)."""
        return [record for _, record in await self.read(run_id)]

    def listener(self, on_append: AppendListener) -> LogListener | None:
        """A listener for appends made by any process, or None if the backend has none.

        `on_append(run_id, seq)` says records up to `seq` of `run_id` are durable;
        `on_append(None, -1)` says some may have been missed (the listener reconnected),
        so whoever tails a log should read it again.
        """
        return None


AppendListener = Callable[[str | None, int], None]


class LogListener(ABC):
    """Cross-process wakeups for log tailers (PostgreSQL LISTEN); owned and closed by its user."""

    @abstractmethod
    async def start(self) -> None:
        """Start listening; returns once the first LISTEN is in place."""

    @abstractmethod
    async def close(self) -> None:
        """Stop listening and release the connection."""


class RunTable(ABC):
    """The runs table: one row per run with its status."""

    @abstractmethod
    async def create(
        self, info: RunInfo, first_record: bytes, *, lease_s: float | None = None
    ) -> None:
        """Insert the run row and its record at seq 0 in one transaction (RunExists if taken).

        With `lease_s`, the row's owner holds a lease that long from now (the store's clock):
        a run started in-process is owned like a claimed one from its first record.
        """

    @abstractmethod
    async def get(self, run_id: str) -> RunInfo | None:
        """Return the run's row, or None."""

    @abstractmethod
    async def set_status(
        self,
        run_id: str,
        status: Status,
        *,
        reason: str | None = None,
        epoch: int | None = None,
        wake_at: float | None = None,
        version: str | None = None,
        record: tuple[int, bytes] | None = None,
    ) -> None:
        """Change a run's status (UnknownRun if there is no such run).

        `version` moves the run to that version of its agent's code (None: it stays).

        `wake_at` (seconds since the epoch) is when a parked (WAITING) run is due to be
        claimed again for a deadline; None for any other status, or no deadline.

        With `epoch`, only while the run's epoch is still that one (StaleEpoch if not),
        so an owner that was fenced off cannot overwrite its successor's state.

        With `record` (seq, bytes), that record is appended in the same transaction (a run
        taken up again: its RunResumed and its status RUNNING, one commit), judged as
        `LogStore.append` judges it (ConflictingRecord; an identical record already there
        is a retry). A fenced-off, unknown or conflicting call writes neither.
        """

    @abstractmethod
    async def list(
        self,
        *,
        status: Status | None = None,
        where: RunFilter = EVERY_RUN,
        limit: int = 100,
        offset: int = 0,
    ) -> list[RunInfo]:
        """List runs with that status (any, if None) that `where` admits, newest first."""

    async def clock(self) -> float:
        """The time leases are measured by (PostgreSQL: the database's clock), in epoch s."""
        return time.time()

    async def count_by_status(self) -> dict[Status, int]:
        """How many runs have each status (statuses with none are left out).

        This default pages through `list()`; the backends answer in one query.
        """
        counts: dict[Status, int] = {}
        offset = 0
        while page := await self.list(limit=1000, offset=offset):
            for info in page:
                counts[info.status] = counts.get(info.status, 0) + 1
            offset += len(page)
        return counts


@dataclass(frozen=True, slots=True)
class Claim:
    """A run this worker now owns, and the epoch that fences its writes."""

    run_id: str
    epoch: int
    # A cancel was asked before the claim: record the cancellation instead of executing.
    cancel: bool = False


@dataclass(frozen=True, slots=True)
class Serves:
    """The runs a worker's code may claim (pinning): runs of the agents of `versions` that
    are on the version given, or on none (runs older than versions); and the runs of `also`,
    on other versions, that its code checked it can continue."""

    versions: Mapping[str, str] = field(default_factory=dict)
    also: Sequence[str] = ()

    def admits(self, run_id: str, agent: str, version: str | None) -> bool:
        """Whether the claim may take this run (what the SQL of each backend says)."""
        if run_id in self.also:
            return True
        mine = self.versions.get(agent)
        return mine is not None and (version is None or version == mine)

    def pairs(self) -> tuple[list[str], list[str]]:
        """The agents and their versions as two parallel lists (the SQL's parameters)."""
        return list(self.versions), list(self.versions.values())


@dataclass(frozen=True, slots=True)
class Stranded:
    """A runnable run that a worker's `Serves` leaves out: on another version, or of an
    agent it has not resolved yet."""

    run_id: str
    agent: str
    version: str | None


@dataclass(frozen=True, slots=True)
class Renewal:
    """What one renewal of a worker's leases found: runs lost, runs to cancel."""

    # Held runs whose epoch moved on: another owner has them now.
    lost: list[str]
    # Held runs (still ours) flagged to be cancelled by whoever owns them.
    cancel: list[str]


class Leases(ABC):
    """Who executes which run: claims with a lease and an epoch, renewals, releases.

    Runnable runs are top-level runs that are queued, paused by a drain, parked (WAITING)
    with a wake-up time that has come, or running with an expired lease. Sub-agent runs
    are never claimed on their own: the worker that owns the parent adopts them
    (`adopt_child`).
    """

    @abstractmethod
    async def claim(
        self,
        owner: str,
        limit: int,
        ttl: float,
        *,
        skip: Sequence[str] = (),
        serves: Serves | None = None,
    ) -> list[Claim]:
        """Take up to `limit` runnable runs for `ttl` seconds, each at a new epoch; never
        the runs in `skip` (ones this worker's code cannot continue); with `serves`, only
        the runs it admits (a worker's code pins runs to their versions)."""

    @abstractmethod
    async def stranded(self, serves: Serves, skip: Sequence[str], limit: int) -> list[Stranded]:
        """Up to `limit` runnable runs (oldest first, not in `skip`) that `serves` does not
        admit, read without claiming them: what a worker looks at to resolve more agents
        and to check other versions' runs against its code."""

    @abstractmethod
    async def renew(self, owner: str, held: Sequence[Claim], ttl: float) -> Renewal:
        """Extend the leases still held at their epochs, in one statement for all of them.

        Returns the runs that were lost and, of those kept, the ones flagged to be
        cancelled: a worker's heartbeat is one round trip however many runs it holds.
        """

    @abstractmethod
    async def release(
        self,
        run_id: str,
        epoch: int | None,
        status: Status,
        reason: str | None = None,
        *,
        final: tuple[int, bytes] | None = None,
        wake_at: float | None = None,
    ) -> bool:
        """Give a run up with its new status; False if the epoch had moved on (nothing changed).

        A run released WAITING (parked) is claimed again once `wake_at` (seconds since the
        epoch) has passed; with None, only an event delivered to it wakes it.

        With `final` (seq, record), that record is appended in the same transaction, judged
        as `LogStore.append` judges it (StaleEpoch, ConflictingRecord; an identical record
        already there is a retry), so nobody ever sees the run's last record without its
        status and release, or the reverse. `epoch` None releases a run nobody leased.
        A run released paused with reason "drain" is runnable again and wakes waiting
        workers.
        """

    @abstractmethod
    async def adopt_child(
        self, run_id: str, owner: str, parent_run_id: str, parent_epoch: int
    ) -> int:
        """Take a sub-agent run at a new epoch, only while its parent is at `parent_epoch`.

        Returns the child's new epoch; StaleEpoch if the parent's epoch has moved on.
        """

    @abstractmethod
    async def take(
        self, run_id: str, owner: str, ttl: float, *, force: bool = False
    ) -> Claim | None:
        """Claim one named top-level run at a new epoch, if nobody holds a live lease on it.

        Unlike `claim`, a run paused for any reason is taken. None if it is held, finished,
        a sub-agent run, or unknown. With `force`, a live lease is taken over too: the
        new epoch fences the old owner, whose next append or renewal is refused.
        """

    @abstractmethod
    async def reopen(self, run_id: str, owner: str, ttl: float) -> Claim | None:
        """Take a failed top-level run at a new epoch with a lease, to retry it: its row says
        running, held by `owner`. None if it is not a failed top-level run (unknown, a
        sub-agent run, or in any other status)."""

    @abstractmethod
    async def request_cancel(self, run_id: str) -> Status | None:
        """Flag an unfinished run to be cancelled by whoever owns it; return its status.

        None if there is no such run. The flag outlives leases: a worker that claims a
        flagged run records its cancellation instead of executing it.
        """

    @abstractmethod
    async def next_wake(self) -> float | None:
        """Seconds until the earliest wake-up time of a parked run (negative when due; None
        if no parked run has one), so an idle worker sleeps no longer than that."""

    @abstractmethod
    async def notify(self) -> None:
        """Wake workers waiting for work (after a submit)."""

    @abstractmethod
    async def wait_for_work(self, max_wait: float) -> None:
        """Return when work may have appeared, or after `max_wait` seconds."""


class Store(ABC):
    """A backend: the log, the runs table, the leases, retention, forks, the workers table,
    shared model rate limits, concurrency limits and schedules over one database."""

    url: str
    log: LogStore
    runs: RunTable
    leases: Leases
    retention: Retention
    rates: RateLimits
    keys: RunKeys
    limits: ConcurrencyLimits
    schedules: Schedules
    forks: ForkTable
    workers: Workers
    # Whether a statement in flight goes on while this process computes: its I/O is the
    # event loop's (a socket, answered in the turns the work gives; `Runtime.take_loading`
    # then takes a run while building it). False where the statement runs on a thread
    # that needs the interpreter's lock the work holds (SQLite): there the work waits for
    # nothing, and the statement after it.
    io_beside_work: bool = True

    @abstractmethod
    async def open(self) -> None:
        """Connect and bring the schema up to date."""

    @abstractmethod
    async def open_existing(self) -> None:
        """Connect to a store that exists with its schema up to date, creating nothing
        (no database file, no table): StoreNotReady naming where it looked and what to run
        otherwise. What read-only commands open."""

    @abstractmethod
    async def close(self) -> None:
        """Release connections."""

    @abstractmethod
    async def migrate(self) -> list[str]:
        """Apply pending migrations; return the names of those applied.

        Callable before open() (as `tether db migrate` does); close() then releases
        whatever it connected.
        """

    async def __aenter__(self) -> Store:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
