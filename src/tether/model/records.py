"""Encoding records for the log, and decoding a run's log in one parse."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any, assert_never

from google.protobuf.message import DecodeError

from tether._proto.tether.v1 import records_pb2 as pb
from tether.foundation.bodies import Body as Body  # the names of record bodies
from tether.foundation.clock import now_us as now_us  # record timestamps; tests move the clock
from tether.foundation.core import Budget
from tether.foundation.errors import CorruptRecord, OutputNotSerializable
from tether.foundation.status import Status

SCHEMA_VERSION = 1

Record = pb.Record
NodeSpec = pb.NodeSpec
NodeCompleted = pb.NodeCompleted
NodeFailed = pb.NodeFailed
RunStarted = pb.RunStarted
RunPaused = pb.RunPaused
RunResumed = pb.RunResumed
RunFinished = pb.RunFinished
RunWaiting = pb.RunWaiting
WaitSpec = pb.WaitSpec
WaitOutcome = pb.WaitOutcome
StepRecorded = pb.StepRecorded
RunStatus = pb.RunStatus
Value = pb.Value
BudgetLimits = pb.BudgetLimits
BudgetUsed = pb.BudgetUsed
LogChunk = pb.LogChunk
BlobRefPb = pb.BlobRef
Sealed = pb.Sealed

# The names of Record's `body` oneof. A reader matches on them exhaustively, ending with
# `case _: assert_never(body)`, so a body added here is a type error in every reader that
# does not handle it (a test checks this list against the schema).


def body_of(record: pb.Record) -> Body | None:
    """The name of the record's body; None when a newer schema wrote one unknown here."""
    body: Body | None = record.WhichOneof("body")
    return body


def label_of(record: pb.Record) -> str:
    """The body's name as a label for logs and metrics, never to dispatch on."""
    return body_of(record) or "unknown"


# -- building records: every record written to a log is made by one of these --------------


def copy_of(record: pb.Record) -> pb.Record:
    """A deep copy of a record, to be changed without touching the original (a fork's)."""
    copy = pb.Record()
    copy.CopyFrom(record)
    return copy


def run_started(
    agent: str,
    input: pb.Value,
    *,
    entry: str,
    root_id: str,
    config: bytes = b"",
    limits: pb.BudgetLimits | None = None,
    parent: tuple[str, str] | None = None,
    version: str = "",
) -> pb.Record:
    """Seq 0 of a run: its agent (and the version of its code), input, limits and the root
    node (`entry`, given the input)."""
    started = pb.RunStarted(
        schema_version=SCHEMA_VERSION,
        agent=agent,
        agent_version=version,
        config=config,
        limits=limits,
        parent_run_id=parent[0] if parent else "",
        parent_node_id=parent[1] if parent else "",
        input=input,
    )
    started.roots.append(pb.NodeSpec(node_id=root_id, kind=entry, input=input))
    return pb.Record(at_us=now_us(), run_started=started)


def node_completed(
    spec: pb.NodeSpec,
    *,
    output: pb.Value,
    spawned: Iterable[pb.NodeSpec],
    blobs: Sequence[pb.BlobRef],
    used: pb.BudgetUsed,
    attempt: int,
    started_at_us: int,
    is_result: bool = False,
    fallback: bool = False,
) -> pb.Record:
    """A node's work, recorded: its output, the successors it spawned, what it used.

    Written slim (see docs/reference/records.md): the node's parents are its spec's,
    recorded by whoever spawned it; `at_us` is `finished_at_us`; the start is `took_us`
    before the finish; attempt 1, an empty `used` and a null output are left out. Read them
    through `at_us_of`, `started_at_us_of`, `attempt_of` and the graph's spec, which also
    read older, fuller records.
    """
    record = open_completed(spec.node_id, spec.kind)
    nc = record.node_completed
    set_value(nc.output, output)
    nc.spawned.extend(spawned)
    if used.ByteSize():
        nc.used.CopyFrom(used)
    close_completed(
        nc,
        blobs=blobs,
        attempt=attempt,
        started_at_us=started_at_us,
        is_result=is_result,
        fallback=fallback,
    )
    return record


def open_completed(node_id: str, kind: str) -> pb.Record:
    """`node_completed` in two steps, for the executor's hot path: the record of node
    `node_id` of `kind` (the caller's strings: no field read back from its spec), whose
    output and successors the caller then encodes into it in place
    (`record.node_completed.output`, `.spawned`: no Value or spec built and copied in),
    then `close_completed`."""
    record = pb.Record()
    nc = record.node_completed
    nc.node_id = node_id
    nc.kind = kind
    return record


def close_completed(
    nc: pb.NodeCompleted,
    *,
    blobs: Sequence[pb.BlobRef],
    attempt: int,
    started_at_us: int,
    is_result: bool = False,
    fallback: bool = False,
) -> None:
    """The rest of a node's record (`open_completed`; its `used` the caller fills in
    place too): its attachments, its attempt and its times, the finish being now."""
    if blobs:
        nc.blobs.extend(blobs)
    if attempt != 1:
        nc.attempt = attempt
    set_times(nc, started_at_us, now_us())
    if is_result:
        nc.is_result = True
    if fallback:
        nc.fallback = True


def node_failed(
    spec: pb.NodeSpec, exc: BaseException, attempt: int, *, retryable: bool
) -> pb.Record:
    """A node's last attempt failed with `exc` (its message capped at 2,000 characters)."""
    message = str(exc) or repr(exc)
    failed = pb.NodeFailed(
        node_id=spec.node_id,
        kind=spec.kind,
        error_type=type(exc).__name__,
        message=message[:2000],
        attempt=attempt,
        retryable=retryable,
    )
    return pb.Record(at_us=now_us(), node_failed=failed)


def wait_completed(
    spec: pb.NodeSpec, *, payload: pb.Value | None, event_id: str = "", timed_out: bool = False
) -> pb.Record:
    """A wait node completed: by an event (its payload is the output) or by its deadline.
    Slim like `node_completed`."""
    at = now_us()
    nc = pb.NodeCompleted(
        node_id=spec.node_id,
        kind=spec.kind,
        started_at_us=at,
        finished_at_us=at,
        wait=pb.WaitOutcome(key=spec.wait.key, event_id=event_id, timed_out=timed_out),
    )
    if payload is not None:
        set_value(nc.output, payload)
    return pb.Record(node_completed=nc)


def run_waiting(keys: Iterable[str], wake_at_us: int) -> pb.Record:
    """The run parks: nothing ready or in flight, these waits pending (0: no deadline)."""
    return pb.Record(at_us=now_us(), run_waiting=pb.RunWaiting(keys=keys, wake_at_us=wake_at_us))


def step_recorded(
    node_id: str,
    index: int,
    name: str,
    *,
    output: pb.Value,
    used: pb.BudgetUsed,
    attempt: int,
    started_at_us: int,
) -> pb.Record:
    """A journaled step of a node, recorded: its position, name, result and what it used.
    Slim like `node_completed`."""
    step = pb.StepRecorded(node_id=node_id, index=index, name=name)
    set_times(step, started_at_us, now_us())
    set_value(step.output, output)
    if used.ByteSize():
        step.used.CopyFrom(used)
    if attempt != 1:
        step.attempt = attempt
    return pb.Record(step_recorded=step)


def set_value(field: pb.Value, value: pb.Value) -> None:
    """Copy `value` into a record's Value field, leaving it absent for JSON null (an absent
    Value decodes to None, as null does)."""
    if value.json != b"null":
        field.CopyFrom(value)


# -- reading records: the fields a slim record leaves out, with the fallback -----------------


def at_us_of(record: pb.Record) -> int:
    """When the record was made: `at_us`, or for a slim node or step record (which leaves
    `at_us` out) its `finished_at_us`."""
    at: int = record.at_us
    if at:
        return at
    if record.HasField("node_completed"):
        return int(record.node_completed.finished_at_us)
    return int(record.step_recorded.finished_at_us)


def set_times(done: pb.NodeCompleted | pb.StepRecorded, started_at_us: int, at_us: int) -> None:
    """A slim record's times: its finish, and its start as the microseconds before (a
    varint of a few bytes, not a second timestamp); `started_at_us` when they are equal."""
    done.finished_at_us = at_us
    if at_us == started_at_us:
        done.started_at_us = started_at_us
    else:
        done.took_us = at_us - started_at_us


def started_at_us_of(done: pb.NodeCompleted | pb.StepRecorded) -> int:
    """When a node's or step's work started: `started_at_us`, or for a slim record
    `took_us` before its finish (0 where an older record has no start)."""
    took: int = done.took_us
    return int(done.finished_at_us) - took if took else int(done.started_at_us)


def attempt_of(done: pb.NodeCompleted | pb.StepRecorded) -> int:
    """The attempt that recorded a node or step: a slim record leaves attempt 1 out."""
    return int(done.attempt) or 1


def waiting_reason(waiting: pb.RunWaiting) -> str:
    """The reason a parked run shows: the keys it waits for."""
    return f"waiting for {', '.join(waiting.keys)}"[:500]


def run_paused(reason: str) -> pb.Record:
    """The run stopped launching nodes and has none in flight."""
    return pb.Record(at_us=now_us(), run_paused=pb.RunPaused(reason=reason))


def run_resumed(
    owner: str,
    epoch: int | None,
    limits: pb.BudgetLimits | None = None,
    *,
    version: str = "",
    retry: bool = False,
) -> pb.Record:
    """The run is taken up again by `owner` at `epoch`, with new limits if given, moved to
    version `version` of its agent's code if given; with `retry`, a failed run is reopened
    (its failed nodes run again)."""
    resumed = pb.RunResumed(
        owner=owner, epoch=epoch or 0, limits=limits, agent_version=version, retry=retry
    )
    return pb.Record(at_us=now_us(), run_resumed=resumed)


def run_finished(status: Status, *, error: str = "", result: pb.Value | None = None) -> pb.Record:
    """The run's end: succeeded (with its result, if any), failed or cancelled."""
    finished = pb.RunFinished(status=status.to_pb(), error=error, result=result)
    return pb.Record(at_us=now_us(), run_finished=finished)


# -- budget limits: the one place that maps Budget to and from BudgetLimits ----------------


def limits_of(budget: Budget | None) -> pb.BudgetLimits:
    """The BudgetLimits a run records for `budget` (None: unlimited)."""
    b = budget or Budget()
    return pb.BudgetLimits(
        max_nodes=b.max_nodes,
        max_tokens=b.max_tokens,
        max_cost=b.max_cost,
        max_wall_ms=int(b.max_wall_s * 1000),
        max_turns=b.max_turns,
    )


def budget_of(limits: pb.BudgetLimits) -> Budget:
    """The Budget a run's recorded limits stand for."""
    return Budget(
        max_nodes=limits.max_nodes,
        max_tokens=limits.max_tokens,
        max_cost=limits.max_cost,
        max_wall_s=limits.max_wall_ms / 1000,
        max_turns=limits.max_turns,
    )


# json.dumps with options builds a new encoder per call; one shared encoder gives the
# same bytes for a third less time.
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


# What `_JSON.encode` runs, made once: the C encoder without its check for cycles (the
# check builds a dict of the containers being encoded on every call; a cycle then ends as
# a RecursionError instead, reported the same way). None where json has no C accelerator.
_C_ENCODE: Any = (
    None
    if c_make_encoder is None
    else c_make_encoder(None, _JSON.default, encode_basestring, None, ":", ",", False, False, False)
)


def dump_json(obj: Any) -> bytes:
    """Compact JSON bytes of a value, or OutputNotSerializable naming why not."""
    try:
        if _C_ENCODE is None or type(obj) is str:
            return _JSON.encode(obj).encode()
        return "".join(_C_ENCODE(obj, 0)).encode()
    except (TypeError, ValueError) as exc:
        raise OutputNotSerializable(f"value is not JSON-serializable: {exc}") from exc
    except RecursionError:
        raise OutputNotSerializable(
            "value is not JSON-serializable: it contains itself (a circular reference) "
            "or is nested too deeply"
        ) from None


_JSON_DECODER = json.JSONDecoder()
# The decoder's scanner without the whitespace matches around it: `dump_json` writes none.
_SCAN: Any = _JSON_DECODER.scan_once  # type: ignore[attr-defined]


def load_json(data: bytes) -> Any:
    """The value of JSON bytes written by `dump_json` (always UTF-8: no encoding to detect)."""
    text = data.decode()
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        end = -1  # not a value at 0 (empty, or leading whitespace): the decoder says why
    if end == len(text):
        return value
    return _JSON_DECODER.decode(text)


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
    body = body_of(record)
    match body:
        case "run_started":
            rs = record.run_started
            yield from _value_ref("run input", rs.input)
            for spec in rs.roots:
                yield from _value_ref(f"input of root {spec.node_id}", spec.input)
        case "node_completed":
            nc = record.node_completed
            yield from _value_ref(f"output of node {nc.node_id}", nc.output)
            for spec in nc.spawned:
                yield from _value_ref(f"input of node {spec.node_id}", spec.input)
                if spec.HasField("wait"):
                    yield from _value_ref(f"data of wait {spec.wait.key}", spec.wait.data)
            for ref in nc.blobs:
                yield f"attachment of node {nc.node_id}", ref
        case "run_finished":
            yield from _value_ref("run result", record.run_finished.result)
        case "step_recorded":
            sr = record.step_recorded
            yield from _value_ref(f"output of step {sr.index} of node {sr.node_id}", sr.output)
        case "node_failed" | "run_paused" | "run_resumed" | "run_waiting" | None:
            pass  # no values
        case _:
            assert_never(body)


def _value_ref(where: str, value: pb.Value) -> Iterator[tuple[str, pb.BlobRef]]:
    if value.WhichOneof("kind") == "blob":
        yield where, value.blob


def _frame(body: bytes) -> bytes:
    """Wrap a serialized Record as a one-entry LogChunk (field 1, length-delimited)."""
    n = len(body)
    if n < 0x80:  # the length in one varint byte, or two: nearly every record
        return bytes((0x0A, n)) + body
    if n < 0x4000:
        return bytes((0x0A, (n & 0x7F) | 0x80, n >> 7)) + body
    head = bytearray(b"\x0a")
    while n >= 0x80:
        head.append((n & 0x7F) | 0x80)
        n >>= 7
    head.append(n)
    return bytes(head) + body


def encode(record: pb.Record) -> bytes:
    """The bytes stored in one run_log row: a LogChunk holding this one record.

    The same record always encodes to the same bytes (a retried append compares them):
    records have no map fields, the only ones whose order `deterministic=True` fixes, and
    asking for it cost 0.2 us a record (tests/test_records.py checks none is added)."""
    return _frame(record.SerializeToString())


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
    if body_of(record) is None:
        raise CorruptRecord(run_id, seq, "has no known body (written by a newer schema?)")
    return record


def decode_log(run_id: str, rows: Sequence[bytes], first_seq: int = 0) -> Sequence[pb.Record]:
    """Decode a run's rows (seq first_seq.. on) with one parse of their concatenation.

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
    for seq, row in enumerate(rows, first_seq):
        decode_one(run_id, seq, row)
    last = first_seq + len(rows) - 1
    raise CorruptRecord(run_id, last, "could not be decoded with the rest of the log")
