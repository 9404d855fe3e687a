"""The forks port of a store: a fork's log references its source's rows instead of copying.

A fork of run S at seq N holds its own rows: seq 0 (its RunStarted, naming S and N), the
records it overrides at their seqs, and everything it records after N. Every other seq
1..N is a *reference*: a range `(from_seq, to_seq, source_run_id)` in `run_refs` saying
those seqs are the rows of the run that holds them. A fork of a fork references the run
that holds each row directly (`plan_segments`), so reading any fork is one statement: its
own rows and the rows of its ranges, in seq order (`LogStore.read` does it for every
caller). Forking a 50,000-record run therefore writes a handful of rows.

Deleting a run that forks reference copies the referenced rows into each fork first
(`ForkTable.detach`, in bounded transactions that copy rows and shrink the range together),
so a fork stays readable after its source is gone; the lineage row (`run_forks`) stays.
A fork made while its source is being deleted never references a row a delete batch
removes: creating it checks, in its transaction, that every run it references still has
the last row of each range (`check_sources`), and a delete batch deletes nothing while any
reference to its runs exists (`Retention.delete_log`). On PostgreSQL the two lock the
source's `runs` row (FOR KEY SHARE against FOR UPDATE), so each sees the other's commit;
SQLite and the memory store run one writer at a time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tether.foundation.errors import BadFork, TetherError, UnknownRun
from tether.store.base import RunInfo


@dataclass(frozen=True, slots=True, order=True)
class Segment:
    """Seqs `from_seq`..`to_seq` of a fork are the rows of `source_run_id` at those seqs."""

    from_seq: int
    to_seq: int
    source_run_id: str


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a fork came from: the run it was forked from and the seq it was forked at."""

    source_run_id: str
    source_seq: int

    def __str__(self) -> str:
        return f"{self.source_run_id}@{self.source_seq}"

    def to_json(self) -> dict[str, str | int]:
        return {"run_id": self.source_run_id, "seq": self.source_seq}


def plan_segments(
    source_run_id: str, source_segments: Iterable[Segment], upto: int, own: Iterable[int] = ()
) -> list[Segment]:
    """The ranges a fork of `source_run_id` at seq `upto` references: seqs 1..`upto`, each
    from the run that holds it (the source's own rows, or the run the source references),
    except the seqs in `own` (the fork's own rows: overridden records)."""
    pieces: list[Segment] = []
    pos = 1
    for seg in sorted(source_segments):
        if seg.from_seq > upto:
            break
        if seg.from_seq > pos:
            pieces.append(Segment(pos, seg.from_seq - 1, source_run_id))
        pieces.append(Segment(max(seg.from_seq, pos), min(seg.to_seq, upto), seg.source_run_id))
        pos = min(seg.to_seq, upto) + 1
    if pos <= upto:
        pieces.append(Segment(pos, upto, source_run_id))
    skip = sorted(set(own))
    out: list[Segment] = []
    for piece in pieces:
        start = piece.from_seq
        for seq in skip:
            if start <= seq <= piece.to_seq:
                if seq > start:
                    out.append(Segment(start, seq - 1, piece.source_run_id))
                start = seq + 1
        if start <= piece.to_seq:
            out.append(Segment(start, piece.to_seq, piece.source_run_id))
    return out


def last_rows(segments: Iterable[Segment]) -> list[tuple[str, int]]:
    """The row each range ends on: a run whose log still has it has the whole range (a log
    is deleted last seqs first)."""
    return sorted({(s.source_run_id, s.to_seq) for s in segments})


def source_gone(run_id: str, *, exists: bool) -> TetherError:
    """The error for a fork whose source `run_id` is gone (or, still `exists`ing, is being
    deleted): nothing of the fork is written."""
    if not exists:
        return UnknownRun(run_id)
    return BadFork(f"run {run_id} is being deleted; cannot fork it")


@dataclass(frozen=True, slots=True)
class NewRun:
    """One run to create with `ForkTable.create_runs`: its row and seq 0, its own rows, the
    ranges it references and where it came from (None: not a fork)."""

    info: RunInfo
    first_record: bytes
    origin: Origin | None = None
    segments: Sequence[Segment] = ()
    entries: Sequence[tuple[int, bytes]] = ()


@dataclass(frozen=True, slots=True)
class Copy:
    """Copy seqs `from_seq`..`to_seq` of `source_run_id` into `run_id`'s log; then drop the
    reference that started at `from_seq`, or start it at `rest_from` (rows left to copy)."""

    run_id: str
    from_seq: int
    to_seq: int
    source_run_id: str
    rest_from: int | None


def plan_copies(refs: Iterable[tuple[str, int, int, str]], limit: int) -> list[Copy]:
    """What to copy of these references `(run_id, from_seq, to_seq, source_run_id)` to
    move at most `limit` rows: whole references first, the last one perhaps in part."""
    copies: list[Copy] = []
    left = limit
    for run_id, first, last, source in refs:
        if left <= 0:
            break
        end = min(last, first + left - 1)
        copies.append(Copy(run_id, first, end, source, None if end == last else end + 1))
        left -= end - first + 1
    return copies


class ForkTable(ABC):
    """Creating forks, their references and lineage; copying references out before a delete."""

    @abstractmethod
    async def create_runs(self, runs: Sequence[NewRun]) -> None:
        """Insert these runs (rows, seq 0, own rows, references, origins) in one
        transaction: all of them, or none (RunExists naming the first id taken). What an
        import (`tether.ops.tlog`) writes a file's runs with. A run referenced that is gone or
        no longer has the rows referenced (being deleted) is refused (`source_gone`)."""

    @abstractmethod
    async def rows_at(self, run_id: str, seqs: Sequence[int]) -> dict[int, bytes]:
        """The run's records at these seqs (its own or referenced), by seq; a seq the run
        does not have is left out. What a fork at a seq reads of its source."""

    @abstractmethod
    async def segments(self, run_id: str) -> list[Segment]:
        """The ranges this run references, in seq order (none for a run that is no fork)."""

    @abstractmethod
    async def origins(self, run_ids: Sequence[str]) -> dict[str, Origin]:
        """Where each of these runs that is a fork came from."""

    @abstractmethod
    async def forks_of(self, run_id: str) -> list[str]:
        """The runs whose logs reference rows of this run."""

    @abstractmethod
    async def detach(self, run_ids: Sequence[str], *, limit: int) -> int:
        """Copy up to `limit` rows that other runs reference from these runs into those
        runs, shrinking their references in the same transaction; return the rows copied
        (fewer than `limit`: no reference to these runs is left)."""
