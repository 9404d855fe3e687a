"""The store interfaces: an append-only log of records and a table of runs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum


class Status(StrEnum):
    """A run's status in the runs table."""

    QUEUED = "queued"
    RUNNING = "running"
    PAUSED = "paused"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)


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


class LogStore(ABC):
    """The append-only run log: `run_log(run_id, seq, record)`."""

    @abstractmethod
    async def append(
        self, run_id: str, entries: Sequence[tuple[int, bytes]], *, epoch: int | None = None
    ) -> None:
        """Durably append records at the given seqs, all or none, before returning.

        A record identical to the one already at its seq is a no-op; a different one
        raises ConflictingRecord. With `epoch`, the append is rejected with StaleEpoch
        in the same statement when the run's epoch has moved on.
        """

    @abstractmethod
    async def read(self, run_id: str, *, after_seq: int = -1) -> list[tuple[int, bytes]]:
        """Return the run's records with seq > after_seq, in seq order."""

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
    async def create(self, info: RunInfo, first_record: bytes) -> None:
        """Insert the run row and its record at seq 0 in one transaction (RunExists if taken)."""

    @abstractmethod
    async def get(self, run_id: str) -> RunInfo | None:
        """Return the run's row, or None."""

    @abstractmethod
    async def set_status(self, run_id: str, status: Status, *, reason: str | None = None) -> None:
        """Change a run's status (UnknownRun if there is no such run)."""

    @abstractmethod
    async def list(
        self, *, status: Status | None = None, limit: int = 100, offset: int = 0
    ) -> list[RunInfo]:
        """List runs, newest first."""


class Store(ABC):
    """A backend: the log and the runs table over one database."""

    url: str
    log: LogStore
    runs: RunTable

    @abstractmethod
    async def open(self) -> None:
        """Connect and bring the schema up to date."""

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
