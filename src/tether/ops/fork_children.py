"""Sub-agent runs under a fork: forked with their parent, as they were at its fork point.

A sub-agent run's id derives from its parent run and node (`ids.child_run_id`), and a
parent's node that runs again reads its child back from the child's log. So a fork of a
parent gets, for each sub-agent run of the source, a fork of that run under the fork's id:

- its node was completed by the fork point: the child had finished before it was, and is
  forked whole (referenced), finished; the fork never runs that node again;
- its node was not completed by then (in flight): the child is cut at the fork point in
  time, the latest record time of the parent's prefix (a record's time is when its node's
  work ended, so the prefix's latest is the earliest moment the prefix was all there); the
  fork's node, when it runs again, reads the child back, finished or continued from there;
- the child had recorded nothing by then: it is left out, and the fork's node starts it.

Any prefix of an in-flight child's log is a state the child went through, so the cut never
makes a child the source did not have. Its own sub-agent runs follow the same rules, at
the same moment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tether.engine.writer import NewFork
from tether.foundation.errors import BadFork, BadRunId
from tether.foundation.ids import check_any_run_id, parent_node_of
from tether.foundation.status import Status
from tether.model.records import Record, at_us_of, copy_of, decode_log
from tether.store.base import RunFilter, RunInfo
from tether.store.forks import Origin, plan_segments

if TYPE_CHECKING:
    from tether.engine.runtime import Runtime

PAGE = 500


async def fork_children(
    runtime: Runtime, source_id: str, fork_id: str, upto_seq: int, until_us: int | None = None
) -> list[NewFork]:
    """The forks of the sub-agent runs of `source_id` (and theirs) to create under
    `fork_id`, `fork_id` being a fork of `source_id` at `upto_seq`: each run before its
    own sub-agent runs. Nothing is written here: the caller records the whole family in one
    transaction (`RecordWriter.create_forks`)."""
    store = runtime.store
    children: list[RunInfo] = []
    while page := await store.runs.list(
        where=RunFilter(parent_run_id=source_id), limit=PAGE, offset=len(children)
    ):
        children += page
    if not children:
        return []
    prefix = decode_log(source_id, await store.log.read_all(source_id))[: upto_seq + 1]
    done = {r.node_completed.node_id for r in prefix if r.HasField("node_completed")}
    if until_us is None:
        until_us = max(at_us_of(r) for r in prefix)
    family: list[NewFork] = []
    for child in children:
        records = decode_log(child.run_id, await store.log.read_all(child.run_id))
        if parent_node_of(child.run_id, source_id) in done:
            cut: int | None = len(records) - 1
        else:
            cut = max((i for i, r in enumerate(records) if at_us_of(r) <= until_us), default=None)
        if cut is None:
            continue  # nothing recorded by then: the fork's node starts it
        try:  # the fork's id may be longer than its source's
            new_id = check_any_run_id(fork_id + child.run_id[len(source_id) :])
        except BadRunId as exc:
            raise BadFork(f"sub-agent run {child.run_id}: {exc}") from None
        family.append(await _fork_one(runtime, child, records, cut, fork_id, new_id))
        family += await fork_children(runtime, child.run_id, new_id, cut, until_us)
    return family


def version_of(records: Sequence[Record]) -> str:
    """The agent version a run's records (from seq 0) end on: its RunStarted's, or the last
    one a RunResumed moved it to."""
    version = records[0].run_started.agent_version
    for record in records:
        if record.HasField("run_resumed") and record.run_resumed.agent_version:
            version = record.run_resumed.agent_version
    return version


async def _fork_one(
    runtime: Runtime, child: RunInfo, records: Sequence[Record], cut: int, fork_id: str, new_id: str
) -> NewFork:
    head = copy_of(records[0])
    rs = head.run_started
    rs.parent_run_id, rs.forked_from_run_id, rs.forked_from_seq = fork_id, child.run_id, cut
    del rs.overridden_node_ids[:]
    status, reason = Status.QUEUED, None  # never claimed: its parent's node adopts it
    if records[cut].HasField("run_finished"):
        status = Status.from_pb(records[cut].run_finished.status)
        reason = records[cut].run_finished.error or None
    version = version_of(records[: cut + 1]) or None
    info = RunInfo(
        new_id, child.agent, status, parent_run_id=fork_id, reason=reason, agent_version=version
    )
    segments = plan_segments(child.run_id, await runtime.store.forks.segments(child.run_id), cut)
    return NewFork(info, head, Origin(child.run_id, cut), segments)
