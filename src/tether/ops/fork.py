"""Forking a run: a new run whose log is another run's records up to a point.

The fork's seq 0 is the source's RunStarted with where it came from (source run, seq, the
overridden nodes); seqs 1..at_seq are the source's records at the same seqs, *referenced*,
never copied (`tether.store.forks`): forking a 50,000-record run writes a few rows. A
record the fork changes is the fork's own row at that seq: a node named in `set_outputs`
has its NodeCompleted output replaced, and a pending node named in `set_inputs` has its
input replaced in the record that spawned it. Nodes pending at that point are pending in
the fork, with the journaled steps they had recorded, and run again when a worker (or
`resume`) takes the fork up: it is created QUEUED with no owner, its row, own rows and
references in one transaction, so no worker ever claims a half-written fork.

Sub-agent runs of the source are forked with it, as they were at the fork point
(`tether.ops.fork_children`). A fork at a seq with nothing to change reads two records of the
source (seq 0 and the fork point). With overrides, or at `before_node`, the source's log is
read and every record is checked against a graph of its own before anything is written.
Either way bad input (a seq past the end, an unknown node, a node not completed or not
pending there) stores nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, assert_never

from tether.engine.writer import NewFork
from tether.foundation.core import Budget
from tether.foundation.errors import BadFork, UnknownRun
from tether.foundation.ids import check_run_id, new_run_id
from tether.model.budgets import Change, apply_change
from tether.model.graph import Graph, GraphError
from tether.model.records import (
    Record,
    body_of,
    copy_of,
    decode_log,
    decode_one,
    limits_of,
    run_resumed,
)
from tether.ops.fork_children import fork_children, version_of
from tether.store.base import RunInfo, Status
from tether.store.forks import Origin, plan_segments

if TYPE_CHECKING:
    from tether.engine.runtime import Runtime
    from tether.model.values import ValueCodec


async def fork(
    runtime: Runtime,
    run_id: str,
    *,
    at_seq: int | None = None,
    before_node: str | None = None,
    set_outputs: Mapping[str, Any] | None = None,
    set_inputs: Mapping[str, Any] | None = None,
    budget: Budget | Change | None = None,
    new_id: str | None = None,
) -> str:
    """Create a queued fork of `run_id` holding its records 0..`at_seq` (or those before
    `before_node` was recorded); return the fork's run id.

    `set_outputs` replaces the recorded outputs of nodes completed by then, `set_inputs`
    the inputs of nodes pending then; `budget` replaces the limits (recorded as a
    RunResumed after the prefix, as a requeue with new limits is): a Budget as it is, a
    change (`budgets.parse_change`) on the limits and usage of the prefix, so `+N` is N
    more than the source had used *at the fork point* (the prefix is read for it).
    UnknownRun, or BadFork naming what does not fit.
    """
    if (at_seq is None) == (before_node is None):
        raise BadFork("give exactly one fork point: at_seq or before_node")
    outputs, inputs = dict(set_outputs or {}), dict(set_inputs or {})
    if both := sorted(set(outputs) & set(inputs)):
        raise BadFork(f"node(s) {', '.join(both)}: set an output or an input, not both")
    fork_id = check_run_id(new_id) if new_id else new_run_id()
    if at_seq is not None and not outputs and not inputs:
        seq, head = await _point(runtime, run_id, at_seq)
        own: dict[int, Record] = {}
    else:
        codec = await _fork_codec(runtime, run_id, fork_id)
        seq, head, own = await _rewritten(
            runtime, codec, run_id, at_seq, before_node, outputs, inputs
        )
    head.run_started.forked_from_run_id = run_id
    head.run_started.forked_from_seq = seq
    del head.run_started.overridden_node_ids[:]
    head.run_started.overridden_node_ids.extend(sorted({*outputs, *inputs}))
    if budget is not None:
        if not isinstance(budget, Budget):  # relative to the fork's own past, not the source's
            budget = apply_change(budget, await runtime.load(run_id, at_seq=seq))
        own[seq + 1] = run_resumed(runtime.owner, None, limits_of(budget))
    if at_seq is not None and not outputs and not inputs:
        await _fork_codec(runtime, run_id, fork_id)  # its own key, if the source has one
    segments = plan_segments(run_id, await runtime.store.forks.segments(run_id), seq, own)
    # On the version its prefix ends on: claimed by workers of that version (pinning).
    version = await _version_at(runtime, run_id, seq, head) or None
    info = RunInfo(fork_id, head.run_started.agent, Status.QUEUED, agent_version=version)
    # With its sub-agent runs' forks, in one transaction: a worker that claims the fork
    # finds them, and a fork refused (say its source is being deleted) leaves none behind.
    family = await fork_children(runtime, run_id, fork_id, seq)
    fork_ = NewFork(info, head, Origin(run_id, seq), segments, own)
    await runtime.writer.create_forks([fork_, *family])
    await runtime.store.leases.notify()
    return fork_id


async def _fork_codec(runtime: Runtime, run_id: str, fork_id: str) -> ValueCodec:
    """The codec the fork writes with: a fork of a run with its own data key gets its own
    (made and stored now; the records it references stay sealed under the source's)."""
    if runtime.keys is None:
        return runtime.new_codec()
    has_key = run_id in await runtime.store.keys.get([run_id])
    return await runtime.codec_for(fork_id, new_key=has_key)


async def _point(runtime: Runtime, run_id: str, seq: int) -> tuple[int, Record]:
    """The fork point `seq` checked against the source's records there; its seq 0 to copy."""
    rows = await runtime.store.forks.rows_at(run_id, [0, seq])
    if 0 not in rows:
        raise UnknownRun(run_id)
    head = copy_of(decode_one(run_id, 0, rows[0]))
    _check_top_level(run_id, head)
    if seq not in rows:
        last = len(await runtime.store.log.read_all(run_id)) - 1
        raise BadFork(f"run {run_id} has seqs 0..{last}; cannot fork at seq {seq}")
    _check_not_end(run_id, seq, decode_one(run_id, seq, rows[seq]))
    return seq, head


async def _rewritten(
    runtime: Runtime,
    codec: ValueCodec,
    run_id: str,
    at_seq: int | None,
    before_node: str | None,
    outputs: dict[str, Any],
    inputs: dict[str, Any],
) -> tuple[int, Record, dict[int, Record]]:
    """Read the source's log, find the fork point, rewrite the records the overrides touch
    and check the prefix replays; the fork's seq 0 and its own records by seq."""
    rows = await runtime.store.log.read_all(run_id)
    if not rows:
        raise UnknownRun(run_id)
    records = decode_log(run_id, rows)
    _check_top_level(run_id, records[0])
    seq = at_seq if at_seq is not None else _seq_before(run_id, records, str(before_node))
    last = len(records) - 1
    if not 0 <= seq <= last:
        raise BadFork(f"run {run_id} has seqs 0..{last}; cannot fork at seq {seq}")
    _check_not_end(run_id, seq, records[seq])
    prefix = list(records[: seq + 1])
    prefix[0] = copy_of(prefix[0])
    changed = await _override_outputs(codec, run_id, seq, prefix, outputs)
    changed |= await _override_inputs(codec, run_id, seq, prefix, inputs)

    scratch = Graph(run_id)
    try:  # the rewritten records, decoded already: replayed as a load replays a record
        scratch.replay(prefix)
    except GraphError as exc:  # the source's log itself does not replay
        bad = scratch.next_seq  # the record that did not fit; those before it applied
        raise BadFork(f"run {run_id}: record at seq {bad} does not replay ({exc})") from None
    return seq, prefix[0], {i: prefix[i] for i in sorted(changed - {0})}


async def _version_at(runtime: Runtime, run_id: str, seq: int, head: Record) -> str:
    """The agent version the source's records up to `seq` end on: its RunStarted's, unless
    a RunResumed moved it (then read from the prefix; its row names its current version)."""
    started = head.run_started.agent_version
    source = await runtime.store.runs.get(run_id)
    if source is None or (source.agent_version or "") == started:
        return started
    records = decode_log(run_id, await runtime.store.log.read_all(run_id))
    return version_of(records[: seq + 1])


def _check_top_level(run_id: str, first: Record) -> None:
    if parent := first.run_started.parent_run_id:
        raise BadFork(f"run {run_id} is a sub-agent run of {parent}; fork its parent")


def _check_not_end(run_id: str, seq: int, record: Record) -> None:
    if record.HasField("run_finished"):
        raise BadFork(
            f"seq {seq} of run {run_id} is its run_finished; fork at seq {seq - 1} or earlier"
        )


def _seq_before(run_id: str, records: Sequence[Record], node_id: str) -> int:
    """The last seq before the record that completed (or failed) `node_id`."""
    spawned = False
    for seq, record in enumerate(records):
        match body_of(record):
            case "run_started":
                spawned |= any(s.node_id == node_id for s in record.run_started.roots)
            case "node_completed":
                nc = record.node_completed
                if nc.node_id == node_id:
                    return seq - 1
                spawned |= any(s.node_id == node_id for s in nc.spawned)
            case "node_failed":
                if record.node_failed.node_id == node_id:
                    return seq - 1
            case "run_paused" | "run_resumed" | "run_finished" | "step_recorded" | "run_waiting":
                pass
            case None:
                pass  # a body from a newer schema: it completes no node of this one
            case never:
                assert_never(never)
    if spawned:
        raise BadFork(f"node {node_id} of run {run_id} was never recorded; fork at a seq instead")
    raise BadFork(f"run {run_id} has no node {node_id}")


async def _override_outputs(
    codec: ValueCodec, run_id: str, seq: int, prefix: list[Record], outputs: dict[str, Any]
) -> set[int]:
    """Replace the outputs of these nodes in `prefix` (BadFork if one is not completed
    there); return the seqs changed."""
    left, changed = set(outputs), set()
    for i, record in enumerate(prefix):
        if record.HasField("node_completed") and record.node_completed.node_id in left:
            node_id = record.node_completed.node_id
            if record.node_completed.HasField("wait"):
                raise BadFork(f"node {node_id} is a wait; its output is the event's payload")
            prefix[i] = record = copy_of(record)
            record.node_completed.output.CopyFrom(await codec.encode(outputs[node_id]))
            left.discard(node_id)
            changed.add(i)
    if left:
        missing = ", ".join(sorted(left))
        raise BadFork(f"run {run_id}: node(s) {missing} not completed at seq {seq}; cannot set")
    return changed


async def _override_inputs(
    codec: ValueCodec, run_id: str, seq: int, prefix: list[Record], inputs: dict[str, Any]
) -> set[int]:
    """Replace the inputs of these nodes, pending at the end of `prefix`, in the records
    that spawned them (BadFork if one is not pending there); return the seqs changed."""
    if not inputs:
        return set()
    done = {
        r.node_completed.node_id if r.HasField("node_completed") else r.node_failed.node_id
        for r in prefix
        if r.HasField("node_completed") or r.HasField("node_failed")
    }
    if finished := sorted(set(inputs) & done):
        raise BadFork(
            f"run {run_id}: node(s) {', '.join(finished)} already recorded at seq {seq}; "
            "set an input of a node pending there (or its output with --set)"
        )
    left, changed = set(inputs), set()
    for i, record in enumerate(prefix):
        if record.HasField("run_started"):
            specs = record.run_started.roots
        elif record.HasField("node_completed"):
            specs = record.node_completed.spawned
        else:
            continue
        hit = [s.node_id for s in specs if s.node_id in left]
        if not hit:
            continue
        prefix[i] = record = copy_of(record) if i else record  # seq 0 is the fork's own copy
        specs = record.run_started.roots if i == 0 else record.node_completed.spawned
        for spec in specs:
            if spec.node_id in left:
                if spec.HasField("wait"):
                    raise BadFork(f"node {spec.node_id} is a wait; it has no input to set")
                spec.input.CopyFrom(await codec.encode(inputs[spec.node_id]))
                left.discard(spec.node_id)
        changed.add(i)
    if left:
        missing = ", ".join(sorted(left))
        raise BadFork(f"run {run_id}: node(s) {missing} not pending at seq {seq}; cannot set input")
    return changed
