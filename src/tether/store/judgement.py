"""The judgement of an append that did not insert every row, for every backend.

A backend inserts what it can (a taken seq is skipped, and a fenced insert skips
everything once the run's epoch has moved on), then reports facts: how many rows it
inserted, the bytes now stored at the appended seqs, and the run's current epoch. This
pure function decides what that means (invariant 4: never a silent drop):

- every appended record is what its seq holds: a retry (or a partial retry), a no-op,
  even from a fenced-off owner, since nothing it asked for is missing or different;
- otherwise, the caller's epoch is not the run's: StaleEpoch. After a change of hands
  the new owner may hold these seqs already; the reason to report, and stop on, is the
  fence, not the conflict it causes;
- otherwise, a seq holds a different record: ConflictingRecord naming the first such seq
  in the order given;
- otherwise, a fenced append whose first seq does not follow the log's last record (seq 0
  excepted: it is written with the run's row) was refused by the statement's own check:
  LogGap naming the run, the seq asked and the log's last seq. The log lost its tail (a
  failover to an asynchronous standby) and the writer's view of the run is stale: it must
  reload the run, never write past a hole;
- otherwise, some seq is free although the insert skipped it, which only a failed fence
  does (StaleEpoch), or, unfenced, a backend error (StoreError).

Only fenced appends (an owner's, at its epoch: every write of an executing run) are held
to follow the log; an unfenced append (tools, tests) may write seqs in any order.

When it returns, the backend commits what it inserted; when it raises, the backend rolls
the whole append back (all or none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from tether.foundation.errors import ConflictingRecord, LogGap, StaleEpoch, StoreError


@dataclass(frozen=True, slots=True)
class AppendFacts:
    """What a backend saw of one append."""

    # Rows the append inserted.
    inserted: int
    # The bytes stored at the appended seqs after the insert (seqs that are free: absent).
    stored: Mapping[int, bytes]
    # The run's epoch now (None: no such run). Read only for a fenced append.
    current_epoch: int | None = None
    # The log's last seq (its own rows and, for a fork, the rows it references; -1: none).
    # Read only for a fenced append that did not insert every row.
    last_seq: int | None = None


def judge_append(
    run_id: str, entries: Sequence[tuple[int, bytes]], epoch: int | None, facts: AppendFacts
) -> None:
    """Return if the append is complete (or an idempotent retry); raise what went wrong."""
    if facts.inserted == len(entries):
        return
    stored = facts.stored
    if all(stored.get(seq) == record for seq, record in entries):
        return
    if epoch is not None and facts.current_epoch != epoch:
        raise StaleEpoch(run_id, epoch)
    for seq, record in entries:
        old = stored.get(seq)
        if old is not None and old != record:
            raise ConflictingRecord(run_id, seq)
    if epoch is not None:
        first = entries[0][0]
        last = facts.last_seq
        if first != 0 and last is not None and last != first - 1:
            raise LogGap(run_id, first, last)
        raise StaleEpoch(run_id, epoch)
    free = [seq for seq, _ in entries if seq not in stored]
    raise StoreError(f"run {run_id}: the append of seqs {free} was skipped without a conflict")


def check_consecutive(run_id: str, entries: Sequence[tuple[int, bytes]]) -> None:
    """A fenced append's seqs follow each other (the statement checks only that the first
    follows the log); LogGap naming the first that does not."""
    for (prev, _), (seq, _) in pairwise(entries):
        if seq != prev + 1:
            raise LogGap(run_id, seq, prev)
