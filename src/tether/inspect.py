"""A run as a plain dict: the stable shape of `tether show --json` and of the HTTP API."""

from __future__ import annotations

import json
from typing import Any

from tether.graph import Graph
from tether.records import Value

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
    return None


def node_view(graph: Graph, node_id: str, *, outputs: bool = False) -> dict[str, Any]:
    state = graph.nodes[node_id]
    view: dict[str, Any] = {
        "node_id": node_id,
        "kind": state.spec.kind,
        "parent_ids": list(state.spec.parent_ids),
        "status": "pending",
    }
    if state.failed is not None:
        view["status"] = "failed"
        view["error"] = {"type": state.failed.error_type, "message": state.failed.message}
    elif node_id in graph.ready:
        view["status"] = "ready"
    nc = state.completed
    if nc is not None:
        view.update(
            status="completed",
            attempt=nc.attempt,
            started_at_us=nc.started_at_us,
            finished_at_us=nc.finished_at_us,
            wall_ms=nc.used.wall_ms,
            tokens_in=nc.used.tokens_in,
            tokens_out=nc.used.tokens_out,
            cost=nc.used.cost,
            spawned=[s.node_id for s in nc.spawned],
            fallback=nc.fallback,
        )
        if outputs:
            view["output"] = _inline(nc.output)
    return view


def run_view(graph: Graph, *, outputs: bool = False) -> dict[str, Any]:
    """Status, budget, result and per-node timings of a rehydrated run."""
    lim = graph.limits
    started = graph.started
    result = None
    if graph.finished is not None and graph.finished.run_finished.HasField("result"):
        result = _inline(graph.finished.run_finished.result)
    order = list(graph.order) + [n for n in graph.nodes if graph.nodes[n].completed is None]
    return {
        "format": FORMAT_VERSION,
        "run_id": graph.run_id,
        "agent": graph.agent,
        "status": graph.status,
        "reason": graph.reason,
        "parent_run_id": started.parent_run_id or None if started else None,
        "records": graph.next_seq,
        "budget": {
            "limits": {
                "max_nodes": lim.max_nodes,
                "max_tokens": lim.max_tokens,
                "max_cost": lim.max_cost,
                "max_wall_ms": lim.max_wall_ms,
                "max_turns": lim.max_turns,
            },
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
        "nodes": [node_view(graph, n, outputs=outputs) for n in order],
    }
