"""Encoding records for the log, and decoding a run's log in one parse."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

from google.protobuf.message import DecodeError

from tether._proto.tether.v1 import records_pb2 as pb
from tether.errors import CorruptRecord, OutputNotSerializable

SCHEMA_VERSION = 1

Record = pb.Record
NodeSpec = pb.NodeSpec
NodeCompleted = pb.NodeCompleted
NodeFailed = pb.NodeFailed
RunStarted = pb.RunStarted
RunPaused = pb.RunPaused
RunResumed = pb.RunResumed
RunFinished = pb.RunFinished
RunStatus = pb.RunStatus
Value = pb.Value
BudgetLimits = pb.BudgetLimits
BudgetUsed = pb.BudgetUsed
LogChunk = pb.LogChunk
BlobRefPb = pb.BlobRef


def now_us() -> int:
    """Wall-clock time in microseconds since the epoch."""
    return time.time_ns() // 1000


def dump_json(obj: Any) -> bytes:
    """Compact JSON bytes of a value, or OutputNotSerializable naming why not."""
    try:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise OutputNotSerializable(f"value is not JSON-serializable: {exc}") from exc


def json_value(obj: Any) -> pb.Value:
    """A Value holding `obj` inline as JSON."""
    return pb.Value(json=dump_json(obj))


def inline_json(value: pb.Value) -> Any:
    """Decode an inline Value (None when unset); blob values need the blob store."""
    if value.WhichOneof("kind") == "json":
        return json.loads(value.json) if value.json else None
    return None


def blob_refs(record: pb.Record) -> Iterator[tuple[str, pb.BlobRef]]:
    """Every blob a record points to, with where it sits (for gc and verify).

    Covers the run input and roots, node outputs, successors' inputs, attached blobs and
    the run result: a new Value field in the schema must be added here too.
    """
    body = record.WhichOneof("body")
    if body == "run_started":
        rs = record.run_started
        yield from _value_ref("run input", rs.input)
        for spec in rs.roots:
            yield from _value_ref(f"input of root {spec.node_id}", spec.input)
    elif body == "node_completed":
        nc = record.node_completed
        yield from _value_ref(f"output of node {nc.node_id}", nc.output)
        for spec in nc.spawned:
            yield from _value_ref(f"input of node {spec.node_id}", spec.input)
        for ref in nc.blobs:
            yield f"attachment of node {nc.node_id}", ref
    elif body == "run_finished":
        yield from _value_ref("run result", record.run_finished.result)


def _value_ref(where: str, value: pb.Value) -> Iterator[tuple[str, pb.BlobRef]]:
    if value.WhichOneof("kind") == "blob":
        yield where, value.blob


def _frame(body: bytes) -> bytes:
    """Wrap a serialized Record as a one-entry LogChunk (field 1, length-delimited)."""
    n = len(body)
    head = bytearray(b"\x0a")
    while n >= 0x80:
        head.append((n & 0x7F) | 0x80)
        n >>= 7
    head.append(n)
    return bytes(head) + body


def encode(record: pb.Record) -> bytes:
    """The bytes stored in one run_log row: a LogChunk holding this one record."""
    return _frame(record.SerializeToString(deterministic=True))


def decode_one(run_id: str, seq: int, row: bytes) -> pb.Record:
    """Decode one row, or CorruptRecord naming the run and seq."""
    chunk = pb.LogChunk()
    try:
        chunk.ParseFromString(row)
    except DecodeError as exc:
        raise CorruptRecord(run_id, seq, f"is not a valid LogChunk ({exc})") from None
    if len(chunk.records) != 1:
        raise CorruptRecord(run_id, seq, f"holds {len(chunk.records)} records, expected exactly 1")
    record: pb.Record = chunk.records[0]
    if record.WhichOneof("body") is None:
        raise CorruptRecord(run_id, seq, "has no known body (written by a newer schema?)")
    return record


def decode_log(run_id: str, rows: Sequence[bytes]) -> Sequence[pb.Record]:
    """Decode a run's rows (seq 0..n-1) with one parse of their concatenation.

    Concatenated LogChunks merge into one, so this costs one C-level parse instead of n.
    If that parse fails or miscounts, fall back to row by row to name the bad seq.
    """
    chunk = pb.LogChunk()
    try:
        chunk.ParseFromString(b"".join(rows))
    except DecodeError:
        pass
    else:
        if len(chunk.records) == len(rows):
            records: Sequence[pb.Record] = chunk.records
            return records
    for seq, row in enumerate(rows):
        decode_one(run_id, seq, row)
    raise CorruptRecord(run_id, len(rows) - 1, "could not be decoded with the rest of the log")
