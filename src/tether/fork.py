"""Forking a run: a new run whose log is another run's records up to a point.

The fork's seq 0 is the source's RunStarted with where it came from (source run, seq, the
overridden nodes); seqs 1..at_seq are the source's records at the same seqs, except that
a node named in `set_outputs` has its NodeCompleted output replaced. Nodes pending at that
point are pending in the fork, with the journaled steps they had recorded, and run again
when a worker (or `resume`) takes the fork up: it is created QUEUED with no owner.

Every record is checked against a graph of its own before anything is written, so bad
input (a seq past the end, an unknown node, a node not completed there) stores nothing.
The row is created PAUSED ("fork in progress") and queued only once the whole prefix is
appended, so no worker ever claims a half-written fork.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, assert_never

from tether.core import Budget
from tether.errors import BadFork, UnknownRun
from tether.graph import Graph, GraphError
from tether.ids import new_run_id
from tether.records import (
    Record,
    body_of,
    copy_of,
    decode_log,
    encode,
    limits_of,
    run_resumed,
)
from tether.store.base import RunInfo, Status

if TYPE_CHECKING:
    from tether.runtime import Runtime

FORKING_REASON = "fork in progress"


async def fork(
    runtime: Runtime,
    run_id: str,
    *,
    at_seq: int | None = None,
    before_node: str | None = None,
    set_outputs: Mapping[str, Any] | None = None,
    budget: Budget | None = None,
    new_id: str | None = None,
) -> str:
    """Create a queued fork of `run_id` holding its records 0..`at_seq` (or those before
    `before_node` was recorded); return the fork's run id.

    `set_outputs` replaces the recorded outputs of nodes completed by then; `budget`
    replaces the limits (recorded as a RunResumed at the end of the prefix, as a requeue
    with new limits is). UnknownRun, or BadFork naming what does not fit.
    """
    if (at_seq is None) == (before_node is None):
        raise BadFork("give exactly one fork point: at_seq or before_node")
    rows = await runtime.store.log.read_all(run_id)
    if not rows:
        raise UnknownRun(run_id)
    records = decode_log(run_id, rows)
    started = records[0].run_started
    if started.parent_run_id:
        raise BadFork(
            f"run {run_id} is a sub-agent run of {started.parent_run_id}; fork its parent"
        )
    seq = at_seq if at_seq is not None else _seq_before(run_id, records, str(before_node))
    _check_seq(run_id, records, seq)
    overrides = dict(set_outputs or {})
    prefix = [copy_of(r) for r in records[: seq + 1]]
    await _override(runtime, run_id, seq, prefix, overrides)
    head = prefix[0].run_started
    head.forked_from_run_id = run_id
    head.forked_from_seq = seq
    del head.overridden_node_ids[:]
    head.overridden_node_ids.extend(sorted(overrides))
    if budget is not None:
        prefix.append(run_resumed(runtime.owner, None, limits_of(budget)))

    fork_id = new_id or new_run_id()
    scratch = Graph(fork_id)
    for i, record in enumerate(prefix):
        try:
            scratch.check(record)
        except GraphError as exc:  # the source's log itself does not replay
            raise BadFork(f"run {run_id}: record at seq {i} does not replay ({exc})") from None
        scratch.apply(record, checked=True)

    info = RunInfo(run_id=fork_id, agent=started.agent, status=Status.PAUSED, reason=FORKING_REASON)
    graph = await runtime.writer.create(info, prefix[0])
    if len(prefix) > 1:
        await runtime.writer.commit(graph, [(r, encode(r)) for r in prefix[1:]])
    # On the version its prefix ends on: claimed by workers of that version (pinning).
    await runtime.store.runs.set_status(fork_id, Status.QUEUED, version=graph.agent_version or None)
    await runtime.store.leases.notify()
    return fork_id


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


def _check_seq(run_id: str, records: Sequence[Record], seq: int) -> None:
    last = len(records) - 1
    if not 0 <= seq <= last:
        raise BadFork(f"run {run_id} has seqs 0..{last}; cannot fork at seq {seq}")
    if records[seq].HasField("run_finished"):
        raise BadFork(
            f"seq {seq} of run {run_id} is its run_finished; fork at seq {seq - 1} or earlier"
        )


async def _override(
    runtime: Runtime, run_id: str, seq: int, prefix: list[Record], overrides: dict[str, Any]
) -> None:
    """Replace the outputs of the overridden nodes in `prefix` (BadFork if one is not there)."""
    left = set(overrides)
    codec = runtime.new_codec()
    for record in prefix:
        if record.HasField("node_completed") and record.node_completed.node_id in left:
            nc = record.node_completed
            if nc.HasField("wait"):
                raise BadFork(f"node {nc.node_id} is a wait; its output is the event's payload")
            nc.output.CopyFrom(await codec.encode(overrides[nc.node_id]))
            left.discard(nc.node_id)
    if left:
        missing = ", ".join(sorted(left))
        raise BadFork(f"run {run_id}: node(s) {missing} not completed at seq {seq}; cannot set")
