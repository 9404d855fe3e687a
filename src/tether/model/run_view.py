"""A run as a plain dict: the stable shape of `tether show --json` and of the HTTP API."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, assert_never

from tether.foundation.status import Status
from tether.model.graph import Graph
from tether.model.records import (
    BudgetLimits,
    BudgetUsed,
    NodeSpec,
    Record,
    RunStarted,
    StepRecorded,
    Value,
    WaitOutcome,
    WaitSpec,
    at_us_of,
    attempt_of,
    body_of,
    started_at_us_of,
)

if TYPE_CHECKING:
    from tether.store.base import RunInfo

FORMAT_VERSION = 1


def _inline(value: Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "json":
        return json.loads(value.json) if value.json else None
    if kind == "blob":
        b = value.blob
        return {
            "$blob": {"url": b.url, "size": b.size, "sha256": b.sha256, "media_type": b.media_type}
        }
    if kind == "sealed":  # encrypted at rest: views never hold the keys
        return {"$sealed": {"key_id": value.sealed.key_id}}
    return None


def node_view(graph: Graph, node_id: str, *, outputs: bool = False) -> dict[str, Any]:
    state = graph.nodes[node_id]
    view: dict[str, Any] = {
        "node_id": node_id,
        "kind": state.spec.kind,
        "parent_ids": list(graph.parents_of(node_id)),
        "status": "pending",
    }
    if state.failed is not None:
        view["status"] = "failed"
        view["error"] = {"type": state.failed.error_type, "message": state.failed.message}
    elif node_id in graph.ready:
        view["status"] = "ready"
    elif node_id in graph.open_waits:
        view["status"] = "waiting"
    if state.is_wait:
        view["wait"] = wait_view(state.spec.wait)
    nc = state.completed
    if nc is not None:
        view.update(
            status="completed",
            attempt=attempt_of(nc),
            started_at_us=started_at_us_of(nc),
            finished_at_us=nc.finished_at_us,
            wall_ms=nc.used.wall_ms,
            rate_wait_ms=nc.used.rate_wait_ms,
            tokens_in=nc.used.tokens_in,
            tokens_out=nc.used.tokens_out,
            cost=nc.used.cost,
            spawned=[s.node_id for s in nc.spawned],
            fallback=nc.fallback,
        )
        if nc.HasField("wait"):
            view["event"] = _outcome_view(nc.wait)
        if outputs:
            view["output"] = _inline(nc.output)
    if state.steps:
        view["steps"] = [_step_view(state.steps[i]) for i in sorted(state.steps)]
    failures = graph.failures_of(node_id)
    if failures:  # the node failed before: every attempt the log knows of, in order
        view["attempts"] = [
            {
                "attempt": f.attempt,
                "status": "failed",
                "error": {"type": f.error_type, "message": f.message},
            }
            for f in failures
        ]
        if nc is not None:
            view["attempts"].append({"attempt": attempt_of(nc), "status": "completed"})
    return view


def retries_view(graph: Graph) -> list[dict[str, Any]]:
    """The run's retries (a failed run reopened), in order: the record's seq and time, how
    the run had failed, and the nodes that had failed then (they ran again)."""
    return [
        {"seq": r.seq, "at_us": r.at_us, "error": r.error, "node_ids": list(r.node_ids)}
        for r in graph.retries
    ]


def wait_view(wait: WaitSpec) -> dict[str, Any]:
    """A wait as whoever answers it sees it: key, deadline, data, schema, sleep or not."""
    return {
        "key": wait.key,
        "deadline_us": wait.deadline_us or None,
        "data": _inline(wait.data) if wait.HasField("data") else None,
        "schema": json.loads(wait.schema) if wait.schema else None,
        "sleep": wait.timer_only,
    }


def waits_view(graph: Graph) -> list[dict[str, Any]]:
    """The run's pending (open) waits, each with its node id."""
    return [{"node_id": w.node_id, **wait_view(w.spec)} for w in graph.pending_waits()]


def _outcome_view(outcome: WaitOutcome) -> dict[str, Any]:
    return {
        "key": outcome.key,
        "event_id": outcome.event_id or None,
        "timed_out": outcome.timed_out,
    }


def limits_view(lim: BudgetLimits) -> dict[str, Any]:
    return {
        "max_nodes": lim.max_nodes,
        "max_tokens": lim.max_tokens,
        "max_cost": lim.max_cost,
        "max_wall_ms": lim.max_wall_ms,
        "max_turns": lim.max_turns,
    }


def rate_wait_ms(graph: Graph) -> int:
    """Milliseconds the run's recorded nodes waited for shared model rate limits."""
    return sum(s.completed.used.rate_wait_ms for s in graph.nodes.values() if s.completed)


def _used_view(u: BudgetUsed) -> dict[str, Any]:
    return {
        "tokens_in": u.tokens_in,
        "tokens_out": u.tokens_out,
        "cost": u.cost,
        "model_calls": u.model_calls,
        "wall_ms": u.wall_ms,
        "rate_wait_ms": u.rate_wait_ms,
    }


def _step_view(sr: StepRecorded) -> dict[str, Any]:
    return {
        "index": sr.index,
        "name": sr.name,
        "attempt": attempt_of(sr),
        "wall_ms": sr.used.wall_ms,
        "tokens_in": sr.used.tokens_in,
        "tokens_out": sr.used.tokens_out,
        "cost": sr.used.cost,
    }


def _spec_view(spec: NodeSpec) -> dict[str, Any]:
    view: dict[str, Any] = {
        "node_id": spec.node_id,
        "kind": spec.kind,
        "parent_ids": list(spec.parent_ids),
    }
    if spec.HasField("wait"):
        view["wait"] = wait_view(spec.wait)
    return view


def record_view(run_id: str, seq: int, record: Record) -> dict[str, Any]:
    """One log record as the event stream sends it: `body` says which kind of record.

    Node records carry `node_id`, the node's `kind` and `status`; every record carries the
    run `status` it implies where it changes it. Values are inline JSON or `{"$blob": ...}`.
    """
    body = body_of(record)
    view: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "run_id": run_id,
        "seq": seq,
        "at_us": at_us_of(record),
        "body": body,
    }
    match body:
        case "run_started":
            rs = record.run_started
            view.update(
                status=Status.RUNNING,
                agent=rs.agent,
                input=_inline(rs.input),
                limits=limits_view(rs.limits),
                parent_run_id=rs.parent_run_id or None,
                parent_node_id=rs.parent_node_id or None,
                forked_from=forked_from(rs),
                spawned=[_spec_view(s) for s in rs.roots],
            )
        case "node_completed":
            nc = record.node_completed
            u = nc.used
            view.update(
                node_id=nc.node_id,
                kind=nc.kind,
                status="completed",
                attempt=attempt_of(nc),
                started_at_us=started_at_us_of(nc),
                finished_at_us=nc.finished_at_us,
                used=_used_view(u),
                output=_inline(nc.output),
                spawned=[_spec_view(s) for s in nc.spawned],
                blobs=[
                    {"url": b.url, "size": b.size, "sha256": b.sha256, "media_type": b.media_type}
                    for b in nc.blobs
                ],
                is_result=nc.is_result,
                fallback=nc.fallback,
            )
            if nc.parent_ids:  # an older record; a slim one leaves its spec's parents out
                view["parent_ids"] = list(nc.parent_ids)
            for spec in view["spawned"]:  # a slim spec leaves out its one parent: this node
                spec["parent_ids"] = spec["parent_ids"] or [nc.node_id]
            if nc.HasField("wait"):
                view["event"] = _outcome_view(nc.wait)
        case "node_failed":
            nf = record.node_failed
            view.update(
                node_id=nf.node_id,
                kind=nf.kind,
                status="failed",
                attempt=nf.attempt,
                retryable=nf.retryable,
                error={"type": nf.error_type, "message": nf.message},
            )
        case "run_paused":
            view.update(status=Status.PAUSED, reason=record.run_paused.reason)
        case "run_waiting":
            rw = record.run_waiting
            view.update(status=Status.WAITING, keys=list(rw.keys), wake_at_us=rw.wake_at_us or None)
        case "run_resumed":
            rr = record.run_resumed
            view.update(status=Status.RUNNING, owner=rr.owner, epoch=rr.epoch)
            if rr.retry:
                view["retry"] = True
            if rr.agent_version:
                view["agent_version"] = rr.agent_version
            if rr.HasField("limits"):
                view["limits"] = limits_view(rr.limits)
        case "run_finished":
            rf = record.run_finished
            view.update(
                status=Status.from_pb(rf.status),
                reason=rf.error,
                result=_inline(rf.result) if rf.HasField("result") else None,
            )
        case "step_recorded":
            sr = record.step_recorded
            view.update(
                node_id=sr.node_id,
                status="step",
                step={"index": sr.index, "name": sr.name, "attempt": attempt_of(sr)},
                started_at_us=started_at_us_of(sr),
                finished_at_us=sr.finished_at_us,
                used=_used_view(sr.used),
                output=_inline(sr.output),
            )
        case None:
            pass  # a body from a newer schema: the envelope only
        case _:
            assert_never(body)
    return view


def forked_from(started: RunStarted | None) -> dict[str, Any] | None:
    """Where a fork came from (source run, seq, overridden nodes); None for other runs."""
    if started is None or not started.forked_from_run_id:
        return None
    return {
        "run_id": started.forked_from_run_id,
        "seq": started.forked_from_seq,
        "overridden_node_ids": list(started.overridden_node_ids),
    }


def run_view(graph: Graph, *, outputs: bool = False, nodes: bool = True) -> dict[str, Any]:
    """Status, budget, result and per-node timings of a rehydrated run (without `nodes`:
    no `nodes` list, for a summary that must stay cheap on a large run)."""
    lim = graph.limits
    started = graph.started
    result = None
    if graph.finished is not None and graph.finished.run_finished.HasField("result"):
        result = _inline(graph.finished.run_finished.result)
    view: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "run_id": graph.run_id,
        "agent": graph.agent,
        "agent_version": graph.agent_version or None,
        "status": graph.status,
        "reason": graph.reason,
        "parent_run_id": started.parent_run_id or None if started else None,
        "forked_from": forked_from(started),
        "records": graph.next_seq,
        "budget": {
            "limits": limits_view(lim),
            "used": {
                "nodes": graph.completed_count,
                "tokens_in": graph.tokens_in,
                "tokens_out": graph.tokens_out,
                "cost": graph.cost,
                "wall_ms": graph.wall_ms(),
                "model_calls": graph.model_calls,
            },
        },
        "result": result,
        "waits": waits_view(graph),
        "retries": retries_view(graph),
    }
    if nodes:
        order = list(graph.order) + [n for n in graph.nodes if graph.completed(n) is None]
        view["nodes"] = [node_view(graph, n, outputs=outputs) for n in order]
    return view


def status_words(status: Status, info: RunInfo | None, now: float) -> tuple[str, str]:
    """A run's `status` and `state`, the words `tether runs` shows, from its log's status.

    `status` is where the run stands (queued, running, paused, waiting, succeeded, failed,
    cancelled) and `state` the same word, except `orphaned` for a running run whose
    owner's lease ran out. Both come from the run's row, which knows what its log cannot:
    that a run no worker has taken up yet is queued, and that its owner is gone. A
    finished log is final, whatever a row read a moment before it says. Without a row (a
    view as of a seq) both are the log's status at that seq.
    """
    if info is None or status.finished:
        return status.value, status.value
    return info.status.value, info.state(now)


def with_row(view: dict[str, Any], info: RunInfo | None, now: float) -> dict[str, Any]:
    """A run view with `status` and `state` as `status_words` gives them."""
    view["status"], view["state"] = status_words(Status(view["status"]), info, now)
    return view
