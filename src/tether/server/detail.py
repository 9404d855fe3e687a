"""A run as `GET /v1/runs/{id}` shows it, and as its page reads it (`/runs/{id}/view`).

One function makes both, so the console's status word, budget bars and wall time are the
API's numbers, which are `tether show`'s: the page computes none of them itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.control.deploys import with_waiting
from tether.foundation.errors import UnknownRun
from tether.model.run_view import rate_wait_ms, run_view, with_row
from tether.server.listing import row_view, urls
from tether.server.schemas import BadRequest

if TYPE_CHECKING:
    from tether.model.graph import Graph
    from tether.server.state import ServerState


def counts(graph: Graph) -> dict[str, int]:
    failed = sum(1 for s in graph.nodes.values() if s.failed is not None and s.completed is None)
    return {
        "nodes": len(graph.nodes),
        "completed": graph.completed_count,
        "failed": failed,
        "ready": len(graph.ready),
        "pending": graph.pending,
    }


async def run_detail(
    server: ServerState,
    run_id: str,
    at: str | None,
    outputs: bool = False,
    *,
    nodes: bool = True,
) -> dict[str, Any]:
    """The run's view (as of seq `at`, the query's text, if given), published for callers
    of the API; without `nodes` (a run page's refresh), its nodes are left out."""
    info = await server.store.runs.get(run_id)
    if info is None:
        raise UnknownRun(run_id)
    [info] = await with_waiting(server.store, [info])
    if at is not None and not (at.isascii() and at.isdigit() and len(at) <= 18):
        raise BadRequest(400, "bad_at", "?at= must be a seq (an integer >= 0)")
    graph = await server.runtime.load(run_id, at_seq=None if at is None else int(at))
    view = run_view(graph, outputs=outputs, nodes=nodes)
    view["at_seq"] = None if at is None else int(at)
    publish = server.publish
    first = graph.started
    now = await server.store.runs.clock()
    with_row(view, info if at is None else None, now)  # as of a seq: the log's words
    view.update(
        counts=counts(graph),
        timings={
            "created_at": info.created_at,
            "updated_at": info.updated_at,
            "last_record_at_us": graph.last_at_us,
            "wall_ms": graph.wall_ms(),
            "rate_wait_ms": rate_wait_ms(graph),
        },
        row=publish.view(row_view(info, now), run_id),
        urls=urls(run_id),
    )
    view["parent_run_id"] = (first.parent_run_id or None) if first else None
    return publish.view(view, run_id)
