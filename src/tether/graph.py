"""The in-memory run graph. `apply(record)` is the only way it changes, live and on replay."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import assert_never

from tether.records import (
    Body,
    BudgetLimits,
    BudgetUsed,
    NodeCompleted,
    NodeFailed,
    NodeSpec,
    Record,
    RunStarted,
    StepRecorded,
    WaitSpec,
    body_of,
)
from tether.status import Status


class GraphError(Exception):
    """A record does not fit the graph it is applied to."""


@dataclass(slots=True)
class NodeState:
    spec: NodeSpec
    waiting: int
    completed: NodeCompleted | None = None
    failed: NodeFailed | None = None
    # Journaled steps recorded by the node's handler, by position (None: none yet).
    steps: dict[int, StepRecorded] | None = None
    # A wait node: an event or its deadline completes it, never a handler.
    is_wait: bool = False


@dataclass(frozen=True, slots=True)
class PendingWait:
    """A wait whose parents are recorded and that no event or deadline completed yet."""

    key: str
    node_id: str
    spec: WaitSpec

    @property
    def deadline_us(self) -> int:
        return self.spec.deadline_us


class Graph:
    """Completed, pending and ready nodes of one run, its successor edges and budget totals."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.started: RunStarted | None = None
        self.nodes: dict[str, NodeState] = {}
        # Ordered set of ready node ids (insertion order is launch order).
        self.ready: dict[str, None] = {}
        self.completed_count = 0
        self.order: list[str] = []  # node ids in the order they were recorded
        self._waiters: dict[str, list[str]] = {}
        # Every wait node of the run by key (keys are unique within a run), and the ids of
        # those open now: parents recorded, not completed (they are never `ready`).
        self.waits: dict[str, str] = {}
        self.open_waits: dict[str, None] = {}
        self.limits = BudgetLimits()
        self.tokens_in = 0
        self.tokens_out = 0
        self.cost = 0.0
        self.model_calls = 0
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
    def pending(self) -> int:
        return len(self.nodes) - self.completed_count

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    def pending_waits(self) -> list[PendingWait]:
        """The open waits, in the order they opened."""
        nodes = self.nodes
        return [
            PendingWait(nodes[nid].spec.wait.key, nid, nodes[nid].spec.wait)
            for nid in self.open_waits
        ]

    def wake_at_us(self) -> int:
        """The earliest deadline of the open waits (µs since the epoch); 0 if none has one."""
        deadlines = [
            d for nid in self.open_waits if (d := self.nodes[nid].spec.wait.deadline_us) > 0
        ]
        return min(deadlines, default=0)

    def wall_ms(self, at_us: int | None = None) -> int:
        """Active wall time of the run: its sessions' durations summed, up to `at_us`."""
        end = self.last_at_us if at_us is None else at_us
        open_us = end - self._session_start_us if self.status is Status.RUNNING else 0
        return (self._closed_wall_us + max(0, open_us)) // 1000

    def exhausted(self, at_us: int) -> str | None:
        """The reason the budget is spent, or None."""
        lim = self.limits
        if lim.max_nodes and self.completed_count >= lim.max_nodes:
            return f"budget: node limit {lim.max_nodes} reached"
        if lim.max_tokens and self.tokens >= lim.max_tokens:
            return f"budget: token limit {lim.max_tokens} reached ({self.tokens} used)"
        if lim.max_cost and self.cost >= lim.max_cost:
            return f"budget: cost limit {lim.max_cost:g} reached ({self.cost:.6g} used)"
        if lim.max_turns and self.model_calls >= lim.max_turns:
            return f"budget: turn limit {lim.max_turns} reached"
        if lim.max_wall_ms and self.wall_ms(at_us) >= lim.max_wall_ms:
            return f"budget: wall-clock limit {lim.max_wall_ms} ms reached"
        return None

    # -- changing --------------------------------------------------------------

    def check(self, record: Record) -> None:
        """Raise GraphError if `record` cannot be applied next."""
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
            case "node_completed":
                nc = record.node_completed
                self._check_completed(nc.node_id, _unpack(nc.spawned), nc)
            case "node_failed":
                if record.node_failed.node_id not in self.nodes:
                    raise GraphError(f"fails node {record.node_failed.node_id}, never spawned")
            case "step_recorded":
                self._check_step(record.step_recorded)
            case "run_paused" | "run_resumed" | "run_finished" | "run_waiting":
                pass
            case _:
                assert_never(body)

    def _check_completed(
        self, nid: str, spawned: list[_Spawned], nc: NodeCompleted | None = None
    ) -> None:
        state = self.nodes.get(nid)
        if state is None:
            raise GraphError(f"completes node {nid}, which was never spawned")
        if state.completed is not None:
            raise GraphError(f"records node {nid} a second time")
        if state.waiting:
            raise GraphError(f"completes node {nid} before its parents")
        if state.is_wait:
            if nc is None or nc.wait.key != state.spec.wait.key:
                raise GraphError(f"completes wait {state.spec.wait.key!r} without its event")
            if state.spec.wait.timer_only and not nc.wait.timed_out:
                raise GraphError(f"completes sleep {state.spec.wait.key!r} by an event")
        nodes = self.nodes
        new: set[str] = set()
        keys: set[str] = set()
        for spec, sid, parents, is_wait in spawned:
            if sid in nodes or sid in new:
                raise GraphError(f"spawns node {sid}, which already exists")
            for parent in parents:
                if parent != nid and parent not in nodes and parent not in new:
                    raise GraphError(f"spawns {sid} after unknown node {parent}")
            if is_wait:
                key = spec.wait.key
                if not key:
                    raise GraphError(f"spawns wait {sid} without a key")
                if key in self.waits or key in keys:
                    raise GraphError(f"spawns a second wait with key {key!r} in this run")
                keys.add(key)
            new.add(sid)

    def _check_step(self, sr: StepRecorded) -> None:
        state = self.nodes.get(sr.node_id)
        if state is None:
            raise GraphError(f"records step {sr.index} of node {sr.node_id}, never spawned")
        if state.completed is not None or state.waiting:
            raise GraphError(f"records step {sr.index} of node {sr.node_id}, which is not running")
        if state.steps is not None and sr.index in state.steps:
            raise GraphError(f"records step {sr.index} of node {sr.node_id} a second time")

    def apply(self, record: Record, *, checked: bool = False) -> list[str]:
        """Apply one record; return the ids of nodes that became ready."""
        body: Body | None = record.WhichOneof("body")  # body_of, without a call: the hot path
        if body == "node_completed":
            # The common record, also the whole of a replay: read each field once, for
            # the check and the apply alike (every protobuf field read builds an object).
            nc = record.node_completed
            nid = nc.node_id
            spawned = _unpack(nc.spawned)
            if not checked:
                if self.started is None:
                    raise GraphError("is a node_completed before run_started")
                self._check_completed(nid, spawned, nc)
            self.next_seq += 1
            at = record.at_us
            if at > self.last_at_us:
                self.last_at_us = at
            return self._complete(nc, nid, spawned)
        if not checked:
            self.check(record)
        self.next_seq += 1
        at = record.at_us
        previous_at = self.last_at_us
        if at > self.last_at_us:
            self.last_at_us = at
        match body:
            case "run_started":
                rs = record.run_started
                self.started = rs
                self.limits = rs.limits
                self._open_session(at)
                return self._add(_unpack(rs.roots))
            case "node_failed":
                self.nodes[record.node_failed.node_id].failed = record.node_failed
            case "step_recorded":
                sr = record.step_recorded
                state = self.nodes[sr.node_id]
                if state.steps is None:
                    state.steps = {}
                state.steps[sr.index] = sr
                self._count(sr.used)
            case "run_paused":
                self._close_session(at)
                self.status, self.reason = Status.PAUSED, record.run_paused.reason
            case "run_waiting":
                self._close_session(at)
                keys = ", ".join(record.run_waiting.keys)
                self.status, self.reason = Status.WAITING, f"waiting for {keys}"[:500]
            case "run_resumed":
                if record.run_resumed.HasField("limits"):
                    self.limits = record.run_resumed.limits
                # After a crash no pause was recorded: the session ended with its last record.
                self._close_session(previous_at if self.status is Status.RUNNING else at)
                self.reason = ""
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

    def _open_session(self, at: int) -> None:
        self.status, self.reason = Status.RUNNING, ""
        self._session_start_us = at

    def _close_session(self, at: int) -> None:
        if self.status is Status.RUNNING:
            self._closed_wall_us += max(0, at - self._session_start_us)
        self.status = Status.PAUSED

    def _complete(self, nc: NodeCompleted, nid: str, spawned: list[_Spawned]) -> list[str]:
        state = self.nodes[nid]
        state.completed = nc
        self.completed_count += 1
        self.order.append(nid)
        self.ready.pop(nid, None)
        if state.is_wait:
            self.open_waits.pop(nid, None)
        used = nc.used  # inline, not _count: the replay hot path
        self.tokens_in += used.tokens_in
        self.tokens_out += used.tokens_out
        self.cost += used.cost
        self.model_calls += used.model_calls
        if nc.is_result and self.result_node is None:
            self.result_node = nid
        became: list[str] = []
        for child in self._waiters.pop(nid, ()):
            child_state = self.nodes[child]
            child_state.waiting -= 1
            if child_state.waiting == 0:
                if child_state.is_wait:
                    self.open_waits[child] = None
                else:
                    self.ready[child] = None
                    became.append(child)
        return became + self._add(spawned) if spawned else became

    def _count(self, used: BudgetUsed) -> None:
        self.tokens_in += used.tokens_in
        self.tokens_out += used.tokens_out
        self.cost += used.cost
        self.model_calls += used.model_calls

    def _add(self, spawned: list[_Spawned]) -> list[str]:
        became: list[str] = []
        nodes = self.nodes
        for spec, sid, parents, is_wait in spawned:
            waiting = 0
            for parent in parents:
                p = nodes.get(parent)
                if p is None or p.completed is None:
                    waiting += 1
                    self._waiters.setdefault(parent, []).append(sid)
            nodes[sid] = NodeState(spec, waiting, is_wait=is_wait)
            if is_wait:
                self.waits[spec.wait.key] = sid
                if waiting == 0:
                    self.open_waits[sid] = None
            elif waiting == 0:
                self.ready[sid] = None
                became.append(sid)
        return became


# A spawned spec with the fields the graph reads, read once: spec, id, parents, is a wait.
_Spawned = tuple[NodeSpec, str, list[str], bool]


def _unpack(specs: Iterable[NodeSpec]) -> list[_Spawned]:
    return [(spec, spec.node_id, list(spec.parent_ids), spec.HasField("wait")) for spec in specs]
