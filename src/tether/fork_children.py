"""Sub-agent runs under a fork: forked with their parent, as they were at its fork point.

A sub-agent run's id derives from its parent run and node (`ids.child_run_id`), and a
parent's node that runs again reads its child back from the child's log. So a fork of a
parent gets, for each sub-agent run of the source, a fork of that run under the fork's id,
cut at the parent's fork point in time: the child's records written by the time the
parent's record at the fork seq was. A child that had finished by then stays finished
(its whole log, referenced; the fork's node, completed or not, reads its result back); one
in flight is cut there and continued when the fork's node runs again; one not started by
then is left out (the node starts it afresh). Its own sub-agent runs follow the same rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.records import copy_of, decode_log
from tether.status import Status
from tether.store.base import RunFilter, RunInfo
from tether.store.forks import Origin, plan_segments

if TYPE_CHECKING:
    from tether.runtime import Runtime

PAGE = 500


async def fork_children(runtime: Runtime, source_id: str, fork_id: str, until_us: int) -> int:
    """Fork the sub-agent runs of `source_id` (and theirs) under `fork_id` as they were at
    `until_us` (a record's `at_us`); return how many runs were forked."""
    store, forked, offset = runtime.store, 0, 0
    while page := await store.runs.list(
        where=RunFilter(parent_run_id=source_id), limit=PAGE, offset=offset
    ):
        offset += len(page)
        for child in page:
            records = decode_log(child.run_id, await store.log.read_all(child.run_id))
            cut = max((i for i, r in enumerate(records) if r.at_us <= until_us), default=None)
            if cut is None:
                continue  # not started by then: the fork's node starts it
            new_id = fork_id + child.run_id[len(source_id) :]
            forked += await fork_children(runtime, child.run_id, new_id, until_us)
            head = copy_of(records[0])
            rs = head.run_started
            rs.parent_run_id, rs.forked_from_run_id, rs.forked_from_seq = fork_id, child.run_id, cut
            del rs.overridden_node_ids[:]
            status, reason = Status.QUEUED, None  # never claimed: its parent's node adopts it
            if records[cut].HasField("run_finished"):
                status = Status.from_pb(records[cut].run_finished.status)
                reason = records[cut].run_finished.error or None
            info = RunInfo(new_id, child.agent, status, parent_run_id=fork_id, reason=reason)
            segments = plan_segments(child.run_id, await store.forks.segments(child.run_id), cut)
            await runtime.writer.create_fork(info, head, Origin(child.run_id, cut), segments, {})
            forked += 1
    return forked
