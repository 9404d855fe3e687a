"""A run's history: its records as checkpoints, one per seq, for `tether history` and the API.

Each checkpoint is what the record at that seq did (kind, node, status, tokens) and when;
`tether fork RUN_ID --at SEQ` starts a new run from any of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, assert_never

from tether.foundation.status import Status
from tether.model.records import Record, at_us_of, body_of, label_of


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The record at one seq of a run, summed up."""

    seq: int
    at_us: int
    kind: str
    node_id: str = ""
    status: str = ""
    tokens: int = 0
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "at_us": self.at_us,
            "kind": self.kind,
            "node_id": self.node_id or None,
            "status": self.status or None,
            "tokens": self.tokens,
            "note": self.note or None,
        }


def checkpoints(records: Sequence[Record]) -> Iterator[Checkpoint]:
    """One checkpoint per record, in seq order."""
    for seq, record in enumerate(records):
        yield _checkpoint(seq, record)


def _checkpoint(seq: int, record: Record) -> Checkpoint:
    at, kind = at_us_of(record), label_of(record)
    body = body_of(record)
    match body:
        case "run_started":
            rs = record.run_started
            note = f"agent {rs.agent}"
            if rs.forked_from_run_id:
                note += f", forked from {rs.forked_from_run_id} at seq {rs.forked_from_seq}"
            return Checkpoint(seq, at, kind, status="started", note=note)
        case "node_completed":
            nc = record.node_completed
            tokens = nc.used.tokens_in + nc.used.tokens_out
            note = f"{nc.kind}, spawned {len(nc.spawned)}" if nc.spawned else nc.kind
            return Checkpoint(seq, at, kind, nc.node_id, "completed", tokens, note)
        case "node_failed":
            nf = record.node_failed
            return Checkpoint(seq, at, kind, nf.node_id, "failed", note=f"{nf.error_type}")
        case "step_recorded":
            sr = record.step_recorded
            tokens = sr.used.tokens_in + sr.used.tokens_out
            note = f"step {sr.index} {sr.name}"
            return Checkpoint(seq, at, kind, sr.node_id, "step", tokens, note)
        case "run_paused":
            return Checkpoint(seq, at, kind, status="paused", note=record.run_paused.reason)
        case "run_resumed":
            return Checkpoint(seq, at, kind, status="resumed", note=record.run_resumed.owner)
        case "run_waiting":
            keys = ", ".join(record.run_waiting.keys)
            return Checkpoint(seq, at, kind, status="waiting", note=keys)
        case "run_finished":
            rf = record.run_finished
            status = Status.from_pb(rf.status).value
            return Checkpoint(seq, at, kind, status=status, note=rf.error)
        case None:
            return Checkpoint(seq, at, kind)
        case _:
            assert_never(body)
