"""The in-memory run graph. `apply(record)` is the only way it changes, live and on replay."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, assert_never

from tether.foundation.money import money
from tether.foundation.status import Status
from tether.model.records import (
    Body,
    BudgetLimits,
    NodeCompleted,
    NodeFailed,
    NodeSpec,
    Record,
    RunStarted,
    StepRecorded,
    WaitSpec,
    at_us_of,
    body_of,
    decode_one,
    waiting_reason,
)

if TYPE_CHECKING:
    from tether.model.columns import NodeColumns


class GraphError(Exception):
    """A record does not fit the graph it is applied to."""


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node as the graph knows it: a read-only snapshot, built when asked for."""

    spec: NodeSpec
    waiting: int
    completed: NodeCompleted | None = None
    failed: NodeFailed | None = None
    # Journaled steps recorded by the node's handler, by position (None: none yet).
    steps: dict[int, StepRecorded] | None = None

    @property
    def is_wait(self) -> bool:
        """A wait node: an event or its deadline completes it, never a handler."""
        return self.spec.HasField("wait")


@dataclass(frozen=True, slots=True)
class RunRetry:
    """A failed run reopened (`RunResumed.retry`): at which record, when, and how the run
    had failed (its RunFinished's error) and which nodes had failed for good then."""

    seq: int
    at_us: int
    error: str
    node_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PendingWait:
    """A wait whose parents are recorded and that no event or deadline completed yet."""

    key: str
    node_id: str
    spec: WaitSpec

    @property
    def deadline_us(self) -> int:
        return self.spec.deadline_us


class NodesView(Mapping[str, NodeState]):
    """Every node spawned so far, by id, in spawn order; states are built on access.

    The graph keeps a node's facts in flat dicts (spec, parents not yet recorded, record)
    rather than one object per node: replay then costs a few dict writes per record, or
    none of its own when read by columns (`apply_columns`).
    """

    __slots__ = ("_g",)

    def __init__(self, graph: Graph) -> None:
        self._g = graph

    def __getitem__(self, node_id: str) -> NodeState:
        g = self._g
        return NodeState(
            g.spec(node_id),
            g._waiting.get(node_id, 0),
            g.completed(node_id),
            g._failed.get(node_id),
            g._steps.get(node_id),
        )

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._g._specs

    def __iter__(self) -> Iterator[str]:
        return iter(self._g._specs)

    def __len__(self) -> int:
        return len(self._g._specs)


class Graph:
    """Completed, pending and ready nodes of one run, its successor edges and budget totals."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.started: RunStarted | None = None
        # The version of the agent's code the run is on: the one it started on, or the
        # last one it moved to (RunResumed.agent_version); "" for runs older than versions.
        self.agent_version = ""
        # Every spawned node's spec; the records of completed (in record order) and failed
        # nodes; how many parents a node still waits for (only while more than 0). A spec or
        # record read by columns is held as the seq of its row in `_rows` until first asked
        # for (`_decode_row`): a load decodes only what its reader needs.
        self._specs: dict[str, NodeSpec | int] = {}
        # The node that spawned each node whose slim spec leaves out that one parent (for a
        # spec still held as a row: once decoded).
        self._spawners: dict[str, str] = {}
        self._done: dict[str, NodeCompleted | int] = {}
        # The rows read by columns: stretches, by the seq of their first row.
        self._row_seqs: list[int] = []
        self._rows: list[Sequence[bytes]] = []
        # A node's failure for good since the run's last retry (while it is not recorded),
        # and every failure it ever recorded, in order: the attempt history a retry numbers
        # its next attempt after.
        self._failed: dict[str, NodeFailed] = {}
        self._failures: dict[str, list[NodeFailed]] = {}
        # The run's retries (a failed run reopened), in order.
        self.retries: list[RunRetry] = []
        self._waiting: dict[str, int] = {}
        # Journaled steps recorded by running nodes, by node id, then position.
        self._steps: dict[str, dict[int, StepRecorded]] = {}
        # Every wait node of the run by key (keys are unique within a run), and the ids of
        # those open now: parents recorded, not completed. A wait is never `ready`.
        self.waits: dict[str, str] = {}
        self._wait_ids: set[str] = set()
        self.open_waits: dict[str, None] = {}
        # Ordered set of ready node ids (insertion order is launch order).
        self.ready: dict[str, None] = {}
        self._waiters: dict[str, list[str]] = {}
        self.limits = BudgetLimits()
        # Budget totals are summed when first read: a replay nobody asks the totals of (a
        # load to show a graph, a resume without token, cost or turn limits) then skips
        # four field reads a record. Summed in record order: the same float cost as eager.
        self._unsummed: list[NodeCompleted | StepRecorded] = []
        self._tokens_in = 0
        self._tokens_out = 0
        self._cost = 0.0
        self._model_calls = 0
        # QUEUED until RunStarted is applied; never RUNNING on a graph that is not executing
        # unless the run's last session ended without a record (a crash).
        self.status = Status.QUEUED
        self.reason = ""
        self.result_node: str | None = None
        self.finished: Record | None = None
        self.next_seq = 0
        self._session_start_us = 0
        self._closed_wall_us = 0
        self.last_at_us = 0

    # -- reading ---------------------------------------------------------------

    @property
    def agent(self) -> str:
        return self.started.agent if self.started else ""

    @property
    def completed_count(self) -> int:
        return len(self._done)

    @property
    def nodes(self) -> NodesView:
        """Every node spawned so far, by id (a view made on each access: held by the graph,
        it made every graph a reference cycle, freed only by a full collection)."""
        return NodesView(self)

    @property
    def order(self) -> list[str]:
        """Completed node ids in the order they were recorded."""
        return list(self._done)

    @property
    def pending(self) -> int:
        return len(self._specs) - len(self._done)

    def completed(self, node_id: str) -> NodeCompleted | None:
        """The record of a completed node, or None."""
        done = self._done.get(node_id)
        return self._decode_row(done) if isinstance(done, int) else done

    def failures_of(self, node_id: str) -> list[NodeFailed]:
        """Every failure recorded for a node, in order (each its last attempt then)."""
        return self._failures.get(node_id, [])

    def last_attempt(self, node_id: str) -> int:
        """The highest attempt a failure of the node recorded (0: none): its next attempt,
        on a retry, is numbered after it."""
        return max((f.attempt for f in self._failures.get(node_id, ())), default=0)

    def steps_of(self, node_id: str) -> dict[int, StepRecorded] | None:
        """The journaled steps a node recorded so far, by position (None: none)."""
        return self._steps.get(node_id)

    def spec(self, node_id: str) -> NodeSpec:
        """The spec of a spawned node (KeyError if none); its parents: `parents_of`."""
        spec = self._specs[node_id]
        if isinstance(spec, int):
            self._decode_row(spec)
            spec = self._specs[node_id]
            assert not isinstance(spec, int)
        return spec

    def parents_of(self, node_id: str, spec: NodeSpec | None = None) -> tuple[str, ...]:
        """The ids of the nodes a node waited for: its spec's parents, or the node that
        spawned it when a slim spec leaves that one parent out (KeyError if never spawned).
        `spec`: the node's, if the caller has it already."""
        parents = (spec if spec is not None else self.spec(node_id)).parent_ids
        if parents:
            return tuple(parents)
        spawner = self._spawners.get(node_id)
        return () if spawner is None else (spawner,)

    def pending_specs(self) -> list[tuple[str, NodeSpec]]:
        """(node id, spec) of the spawned nodes not completed yet that a handler must
        execute (waits are completed by events, not handlers), in spawn order."""
        # Looked for from the newest spawn back, until all are found: the pending nodes of
        # a long run are nearly always its last spawned, so a resume does not walk the
        # thousands of nodes recorded before them.
        done, waits = self._done, self._wait_ids
        left = len(self._specs) - len(done) - sum(1 for w in waits if w not in done)
        found: list[str] = []
        if left:
            for nid in reversed(self._specs):
                if nid not in done and nid not in waits:
                    found.append(nid)
                    if len(found) == left:
                        break
            found.reverse()
        return [(nid, self.spec(nid)) for nid in found]

    def pending_kinds(self) -> list[str]:
        """The kinds of `pending_specs`, each once, in spawn order."""
        return list(dict.fromkeys(s.kind for _, s in self.pending_specs()))

    def pending_waits(self) -> list[PendingWait]:
        """The open waits, in the order they opened."""
        return [
            PendingWait(self.spec(nid).wait.key, nid, self.spec(nid).wait)
            for nid in self.open_waits
        ]

    def wake_at_us(self) -> int:
        """The earliest deadline of the open waits (µs since the epoch); 0 if none has one."""
        deadlines = [d for nid in self.open_waits if (d := self.spec(nid).wait.deadline_us) > 0]
        return min(deadlines, default=0)

    @property
    def tokens_in(self) -> int:
        self._sum()
        return self._tokens_in

    @property
    def tokens_out(self) -> int:
        self._sum()
        return self._tokens_out

    @property
    def cost(self) -> float:
        self._sum()
        return self._cost

    @property
    def model_calls(self) -> int:
        self._sum()
        return self._model_calls

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    def wall_ms(self, at_us: int | None = None) -> int:
        """Active wall time of the run: its sessions' durations summed, up to `at_us`."""
        end = self.last_at_us if at_us is None else at_us
        open_us = end - self._session_start_us if self.status is Status.RUNNING else 0
        return (self._closed_wall_us + max(0, open_us)) // 1000

    def exhausted(self, at_us: int, limits: BudgetLimits | None = None) -> str | None:
        """The reason the budget (or `limits`, if given) is spent, or None."""
        lim = self.limits if limits is None else limits
        if lim.max_nodes and self.completed_count >= lim.max_nodes:
            return f"budget: node limit {lim.max_nodes} reached"
        if lim.max_tokens and self.tokens >= lim.max_tokens:
            return f"budget: token limit {lim.max_tokens} reached ({self.tokens} used)"
        if lim.max_cost and self.cost >= lim.max_cost:
            return f"budget: cost limit {money(lim.max_cost)} reached ({money(self.cost)} used)"
        if lim.max_turns and self.model_calls >= lim.max_turns:
            return f"budget: turn limit {lim.max_turns} reached"
        if lim.max_wall_ms and self.wall_ms(at_us) >= lim.max_wall_ms:
            return f"budget: wall-clock limit {lim.max_wall_ms} ms reached"
        return None

    # -- changing --------------------------------------------------------------

    def check(self, record: Record) -> None:
        """Raise GraphError if `record` cannot be applied next."""
        # A node's record, the executor's check of every node, first and as `apply` reads
        # it: another body reads as an empty NodeCompleted, without a node id.
        nc = record.node_completed
        nid = nc.node_id
        if nid and self.started is not None:
            self._check_completed(nid, _split_spawned(nid, nc.spawned, self._specs)[1], nc)
            return
        body = body_of(record)
        if body is None:
            raise GraphError("has no known body (written by a newer schema?)")
        if body == "run_started":
            if self.started is not None:
                raise GraphError("is a second run_started")
            return
        if self.started is None:
            raise GraphError(f"is a {body} before run_started")
        match body:
            case "node_completed":  # with no node id (one with an id is checked above)
                self._check_completed(nid, _split_spawned(nid, nc.spawned, self._specs)[1], nc)
            case "node_failed":
                if record.node_failed.node_id not in self._specs:
                    raise GraphError(f"fails node {record.node_failed.node_id}, never spawned")
            case "step_recorded":
                self._check_step(record.step_recorded)
            case "run_resumed":
                if record.run_resumed.retry and self.status is not Status.FAILED:
                    raise GraphError(f"retries a run that is {self.status}, not failed")
            case "run_paused" | "run_finished" | "run_waiting":
                pass
            case _:
                assert_never(body)

    def check_plain(self, nc: NodeCompleted, successor: str | None, node_id: str) -> None:
        """`check` of the record `nc` of node `node_id` that spawns nothing, or only
        `successor`, plain (not a wait, its one parent the node: slim): the executor's
        common record, checked from what it built instead of read back from the record.
        GraphError as `check` says."""
        if self.started is None:
            raise GraphError("is a node_completed before run_started")
        self._check_completed(node_id, (), nc)
        if successor is not None and successor in self._specs:
            raise GraphError(f"spawns node {successor}, which already exists")

    def _check_completed(
        self, nid: str, spawned: Sequence[_Spawned], nc: NodeCompleted | None = None
    ) -> None:
        if nid not in self._specs:
            raise GraphError(f"completes node {nid}, which was never spawned")
        if nid in self._done:
            raise GraphError(f"records node {nid} a second time")
        if nid in self._waiting:
            raise GraphError(f"completes node {nid} before its parents")
        if nid in self._wait_ids:
            self._check_wait_done(nid, nc)
        if spawned:
            self._check_spawned(nid, spawned)

    def _check_wait_done(self, nid: str, nc: NodeCompleted | None) -> None:
        wait = self.spec(nid).wait
        if nc is None or nc.wait.key != wait.key:
            raise GraphError(f"completes wait {wait.key!r} without its event")
        if wait.timer_only and not nc.wait.timed_out:
            raise GraphError(f"completes sleep {wait.key!r} by an event")

    def _check_spawned(self, nid: str, spawned: Sequence[_Spawned]) -> None:
        nodes = self._specs
        new: set[str] = set()
        keys: set[str] = set()
        for spec, sid, parents in spawned:
            if sid in nodes or sid in new:
                raise GraphError(f"spawns node {sid}, which already exists")
            for parent in parents:
                if parent != nid and parent not in nodes and parent not in new:
                    raise GraphError(f"spawns {sid} after unknown node {parent}")
            if spec.HasField("wait"):
                key = spec.wait.key
                if not key:
                    raise GraphError(f"spawns wait {sid} without a key")
                if key in self.waits or key in keys:
                    raise GraphError(f"spawns a second wait with key {key!r} in this run")
                keys.add(key)
            new.add(sid)

    def _check_step(self, sr: StepRecorded) -> None:
        nid, index = sr.node_id, sr.index  # the flat dicts, not a NodeState: once per step
        if nid not in self._specs:
            raise GraphError(f"records step {index} of node {nid}, never spawned")
        if nid in self._done or self._waiting.get(nid):
            raise GraphError(f"records step {index} of node {nid}, which is not running")
        steps = self._steps.get(nid)
        if steps is not None and index in steps:
            raise GraphError(f"records step {index} of node {nid} a second time")

    def apply(self, record: Record, *, checked: bool = False) -> list[str]:
        """Apply one record; return the ids of nodes that became ready."""
        # NodeCompleted is the common record and the whole of a replay, so this is written
        # for speed: inline (calls cost more than the dict writes here), each protobuf
        # field read once (a read costs more than a dict write: it looks the name up and
        # builds an object), the check and the apply sharing those reads. Another body
        # reads as an empty NodeCompleted, without the node id every recorded one has.
        nc = record.node_completed
        nid = nc.node_id
        if not nid:
            return self._apply_other(record, checked)
        specs, finished, ready = self._specs, self._done, self.ready
        plain, many = _split_spawned(nid, nc.spawned, specs)
        if not checked:
            if self.started is None:
                raise GraphError("is a node_completed before run_started")
            self._check_completed(nid, many, nc)
        self.next_seq += 1
        at = record.at_us or nc.finished_at_us  # a slim record's time (records.at_us_of)
        if at > self.last_at_us:
            self.last_at_us = at
        finished[nid] = nc
        if nid in ready:
            del ready[nid]
        if self.open_waits and nid in self.open_waits:
            del self.open_waits[nid]
        self._unsummed.append(nc)
        if nc.is_result and self.result_node is None:
            self.result_node = nid
        became: list[str] = []
        if self._waiters:
            children = self._waiters.pop(nid, None)
            if children is not None:
                self._release(children, became)
        if plain is not None:
            spec, sid = plain
            specs[sid] = spec
            if not spec.parent_ids:  # a slim spec: its one parent is `nid`
                self._spawners[sid] = nid
            ready[sid] = None
            became.append(sid)
        elif many:
            became += self._add(many, nid)
        return became

    def replay(self, records: Iterable[Record]) -> None:
        """Apply `records` in order: the same graph as `apply` on each in turn (and the same
        GraphError at the same record, with the records before it applied).

        Rehydration's loop. A node's record of the common shape (no wait, one plain
        successor or none, nothing waiting on it) is applied inline here, with the graph's
        fields held in locals and each protobuf field read once; any other record, and any
        record that would not fit, goes through `apply`, which checks and raises.
        """
        specs, finished, ready = self._specs, self._done, self.ready
        waiting, waiters, wait_ids = self._waiting, self._waiters, self._wait_ids
        spawners = self._spawners
        unsummed = self._unsummed.append
        seq, last_at = self.next_seq, self.last_at_us
        result = self.result_node
        try:
            for record in records:
                nc = record.node_completed
                nid = nc.node_id
                if (
                    not nid
                    or nid not in specs
                    or nid in finished
                    or nid in waiting
                    or nid in waiters
                    or nid in wait_ids
                    or self.started is None
                ):
                    seq, last_at, result = self._apply_one(record, seq, last_at, result)
                    continue
                spawned = nc.spawned
                n = len(spawned)
                if n:
                    if n != 1:
                        seq, last_at, result = self._apply_one(record, seq, last_at, result)
                        continue
                    spec = spawned[0]
                    sid, parents = spec.node_id, spec.parent_ids
                    if (
                        (parents and (len(parents) != 1 or parents[0] != nid))
                        or sid in specs
                        or spec.HasField("wait")
                    ):
                        seq, last_at, result = self._apply_one(record, seq, last_at, result)
                        continue
                    specs[sid] = spec
                    if not parents:  # a slim spec: its one parent is `nid`
                        spawners[sid] = nid
                seq += 1
                at = record.at_us or nc.finished_at_us  # a slim record's time (at_us_of)
                if at > last_at:
                    last_at = at
                finished[nid] = nc
                if nid in ready:
                    del ready[nid]
                unsummed(nc)
                if result is None and nc.is_result:
                    result = nid
                if n:
                    ready[sid] = None
        finally:
            self.next_seq, self.last_at_us, self.result_node = seq, last_at, result

    def apply_columns(self, columns: NodeColumns, rows: Sequence[bytes]) -> bool:
        """Apply node records read by columns (`columns.replay_rows`): the graph `replay`
        gives of them. False, with nothing changed, if they do not all fit (a node recorded
        twice or before it was spawned, a node others wait for); `replay` of the decoded
        records then applies those before the misfit and names it.

        `node_columns` let through only records of the common shape: each records a node
        and spawns slim specs (the recorded node their one parent), none a wait, so each
        spawned node is ready at once and stays so until its record.
        """
        specs, done, ready = self._specs, self._done, self.ready
        nids, sids, spawner = columns.node_ids, columns.spawned, columns.spawner
        m, p = len(nids), len(sids)
        if self.started is None or (self._waiters and not self._waiters.keys().isdisjoint(nids)):
            return False
        # Every node must be spawned before its record: by an earlier row of these (then it
        # is new, not in `specs`, so not recorded before), or before them (then it must be
        # neither recorded, nor waiting for parents, nor a wait).
        q = min(p, m - 1)
        chain = isinstance(spawner, range) and nids[1 : q + 1] == sids[:q]
        if chain:  # row k records the node row k - 1 spawned
            # Those spawned ids are keyed by the recorded ids, equal strings: each id is
            # hashed once (a load's strings are new, their hashes not yet cached).
            spawned = nids[1 : q + 1]
            if not specs.keys().isdisjoint(spawned) or not specs.keys().isdisjoint(sids[q:]):
                return False
            before = nids[:1] + nids[q + 1 :]
        else:
            if not specs.keys().isdisjoint(sids) or len(dict.fromkeys(sids)) != p:
                return False
            row_of = dict(zip(sids, spawner, strict=True))
            before = []
            for k, nid in enumerate(nids):
                j = row_of.get(nid)
                if j is None:
                    before.append(nid)
                elif j >= k:
                    return False
        waiting, wait_ids = self._waiting, self._wait_ids
        for nid in before:
            if nid not in specs or nid in done or nid in waiting or nid in wait_ids:
                return False
        # None of these ids is recorded yet (those spawned before were looked at above, the
        # others are new): a node recorded twice here, or a chain's last spawned id recorded
        # here, shows in the count, and taking these out again changes nothing else.
        seq, size = self.next_seq, len(done)
        # In a chain a spawned id's seq is its spawner's: the same int objects, made once.
        seqs: Sequence[int] = list(range(seq, seq + m)) if chain else range(seq, seq + m)
        done.update(zip(nids, seqs, strict=True))
        if len(done) != size + m or (chain and not done.keys().isdisjoint(sids[q:])):
            for nid in nids:
                done.pop(nid, None)
            return False
        self._row_seqs.append(seq)
        self._rows.append(rows)
        if ready:
            for nid in before:
                ready.pop(nid, None)
        if chain:
            specs.update(zip(spawned, seqs[:q], strict=True))
            specs.update(zip(sids[q:], range(seq + q, seq + p), strict=True))
        elif isinstance(spawner, range):
            specs.update(zip(sids, range(seq, seq + p), strict=True))
        else:
            specs.update(zip(sids, [seq + j for j in spawner], strict=True))
        for sid in sids[q:] if chain else sids:
            if sid not in done:
                ready[sid] = None
        self.next_seq = seq + m
        if columns.last_at_us > self.last_at_us:
            self.last_at_us = columns.last_at_us
        if self.result_node is None and columns.result_row >= 0:
            self.result_node = nids[columns.result_row]
        if columns.tokens_in or columns.tokens_out or columns.costs or columns.model_calls:
            self._sum()  # the records before these first: a float sum depends on its order
            self._tokens_in += columns.tokens_in
            self._tokens_out += columns.tokens_out
            cost = self._cost
            for c in columns.costs:
                cost += c
            self._cost = cost
            self._model_calls += columns.model_calls
        return True

    def _decode_row(self, seq: int) -> NodeCompleted:
        """Decode the node record at `seq`, applied by columns and held as its row until now:
        its record and the specs it spawned take the place of their seq."""
        i = bisect_right(self._row_seqs, seq) - 1
        row = self._rows[i][seq - self._row_seqs[i]]
        nc = decode_one(self.run_id, seq, row).node_completed
        nid = nc.node_id
        self._done[nid] = nc
        for spec in nc.spawned:  # slim specs (`node_columns`): their one parent is `nid`
            self._specs[spec.node_id] = spec
            self._spawners[spec.node_id] = nid
        return nc

    def _apply_one(
        self, record: Record, seq: int, last_at: int, result: str | None
    ) -> tuple[int, int, str | None]:
        """`apply(record)` inside `replay`, with replay's locals written back around it."""
        self.next_seq, self.last_at_us, self.result_node = seq, last_at, result
        self.apply(record)
        return self.next_seq, self.last_at_us, self.result_node

    def _apply_other(self, record: Record, checked: bool) -> list[str]:
        """Apply a record of any body but NodeCompleted."""
        body: Body | None = record.WhichOneof("body")
        if not checked:
            self.check(record)
        self.next_seq += 1
        at = at_us_of(record)
        previous_at = self.last_at_us
        if at > self.last_at_us:
            self.last_at_us = at
        match body:
            case "run_started":
                rs = record.run_started
                self.started = rs
                self.limits = rs.limits
                self.agent_version = rs.agent_version
                self._open_session(at)
                return self._add(_unpack(rs.roots))
            case "node_failed":
                nf = record.node_failed
                self._failed[nf.node_id] = nf
                self._failures.setdefault(nf.node_id, []).append(nf)
            case "step_recorded":
                sr = record.step_recorded
                self._steps.setdefault(sr.node_id, {})[sr.index] = sr
                self._unsummed.append(sr)
            case "run_paused":
                self._close_session(at)
                self.status, self.reason = Status.PAUSED, record.run_paused.reason
            case "run_waiting":
                self._close_session(at)
                self.status, self.reason = Status.WAITING, waiting_reason(record.run_waiting)
            case "run_resumed":
                if record.run_resumed.retry:
                    self._reopen(self.next_seq - 1, at)
                if record.run_resumed.HasField("limits"):
                    self.limits = record.run_resumed.limits
                if record.run_resumed.agent_version:
                    self.agent_version = record.run_resumed.agent_version
                # After a crash no pause was recorded: the session ended with its last record.
                self._close_session(previous_at if self.status is Status.RUNNING else at)
                self._open_session(at)
            case "run_finished":
                self._close_session(at)
                self.finished = record
                self.status = Status.from_pb(record.run_finished.status)
                self.reason = record.run_finished.error
            case "node_completed" | None:  # handled above / refused by check
                raise GraphError(f"cannot apply a {body or 'bodiless'} record here")
            case _:
                assert_never(body)
        return []

    def _reopen(self, seq: int, at: int) -> None:
        """A failed run retried: it no longer has an end, and the nodes that failed for
        good (still unrecorded, so still ready) are failed no more; they run again."""
        failed = tuple(nid for nid in self._failed if nid not in self._done)
        error = self.reason
        for nid in failed:
            del self._failed[nid]
        self.finished = None
        self.retries.append(RunRetry(seq, at, error, failed))

    def _open_session(self, at: int) -> None:
        self.status, self.reason = Status.RUNNING, ""
        self._session_start_us = at

    def _close_session(self, at: int) -> None:
        if self.status is Status.RUNNING:
            self._closed_wall_us += max(0, at - self._session_start_us)
        self.status = Status.PAUSED

    def _release(self, children: list[str], became: list[str]) -> None:
        """Children of a node just recorded: one parent fewer to wait for each."""
        waiting = self._waiting
        for child in children:
            left = waiting[child] - 1
            if left:
                waiting[child] = left
            else:
                del waiting[child]
                if child in self._wait_ids:
                    self.open_waits[child] = None
                else:
                    self.ready[child] = None
                    became.append(child)

    def _sum(self) -> None:
        """Add what the records applied since the last read used to the budget totals."""
        if not self._unsummed:
            return
        for record in self._unsummed:
            if record.HasField("used"):
                used = record.used
                self._tokens_in += used.tokens_in
                self._tokens_out += used.tokens_out
                self._cost += used.cost
                self._model_calls += used.model_calls
        self._unsummed.clear()

    def _add(self, spawned: Sequence[_Spawned], done: str = "") -> list[str]:
        """Add spawned nodes (`done`: the node spawning them, completed already)."""
        became: list[str] = []
        specs, finished, ready = self._specs, self._done, self.ready
        for spec, sid, parents in spawned:
            waiting = 0
            for parent in parents:
                if parent != done and parent not in finished:
                    waiting += 1
                    self._waiters.setdefault(parent, []).append(sid)
            specs[sid] = spec
            if done and not spec.parent_ids:  # a slim spec: its one parent is `done`
                self._spawners[sid] = done
            is_wait = spec.HasField("wait")
            if is_wait:
                self.waits[spec.wait.key] = sid
                self._wait_ids.add(sid)
            if waiting:
                self._waiting[sid] = waiting
            elif is_wait:
                self.open_waits[sid] = None
            else:
                ready[sid] = None
                became.append(sid)
        return became


# A spawned spec with the two fields the graph reads, read once.
_Spawned = tuple[NodeSpec, str, Sequence[str]]


def _split_spawned(
    nid: str, spawned: Sequence[NodeSpec], specs: dict[str, NodeSpec | int]
) -> tuple[tuple[NodeSpec, str] | None, Sequence[_Spawned]]:
    """The spawns of node `nid` as (the common one, the others; none: `()`, no list made).
    The common spawn needs no more checking: one new node, not a wait, whose only parent
    is the node just recorded (a chain's next step, an agent's next turn), named (older
    records) or left out (slim ones). Read by index: iterating a repeated field ends in an
    IndexError, built and dropped."""
    if len(spawned) != 1:
        return None, _unpack(spawned) if spawned else ()
    spec = spawned[0]
    sid, parents = spec.node_id, spec.parent_ids
    if (
        (not parents or (len(parents) == 1 and parents[0] == nid))
        and sid not in specs
        and not spec.HasField("wait")
    ):
        return (spec, sid), ()
    return None, [(spec, sid, parents)]


def _unpack(specs: Iterable[NodeSpec]) -> list[_Spawned]:
    """(spec, id, parents) of spawned specs; a slim spec's one parent, left out, is the
    node that spawned them, which `_add` counts as recorded."""
    return [(spec, spec.node_id, spec.parent_ids) for spec in specs]
