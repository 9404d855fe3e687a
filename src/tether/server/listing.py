"""GET /v1/runs: a page of runs, filtered, optionally with usage and sub-agent runs.

The console asks for top-level runs with `children=1&usage=1`: each row then carries
what it used so far (from its log) and its sub-agent runs, which the console nests
under it. Plain callers get the rows as the runs table has them, which costs one query.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tether.deploys import with_waiting
from tether.server.request import server_of
from tether.server.schemas import BadRequest
from tether.store.base import STATES, RunFilter, RunInfo, state_filter
from tether.store.forks import Origin

if TYPE_CHECKING:
    from tether.server.app import TetherServer

# Sub-agent runs shown under one run; a run with more says so with `children_more`.
MAX_CHILDREN = 100
FLAGS = ("top", "usage", "children")


def urls(run_id: str) -> dict[str, str]:
    base = f"/v1/runs/{run_id}"
    return {
        "self": base,
        "events": f"{base}/events",
        "cancel": f"{base}/cancel",
        "resume": f"{base}/resume",
        "fork": f"{base}/fork",
        "signals": f"{base}/signals/{{key}}",
        "page": f"/runs/{run_id}",
    }


def row_view(info: RunInfo, now: float, origin: Origin | None = None) -> dict[str, Any]:
    """A runs-table row; `state` tells a live owner (`running`) from a dead one
    (`orphaned`), `lease_left_s` by the store's clock; `forked_from` a fork's source and seq."""
    return {
        "run_id": info.run_id,
        "agent": info.agent,
        "status": info.status.value,
        "state": info.state(now),
        "lease_left_s": info.lease_left(now),
        "reason": info.reason,
        "key": info.key,
        "priority": info.priority,
        "parent_run_id": info.parent_run_id,
        "forked_from": None if origin is None else origin.to_json(),
        "created_at": info.created_at,
        "updated_at": info.updated_at,
        "owner": info.owner,  # made opaque by Publisher.view before it is sent
        "urls": urls(info.run_id),
    }


async def usage_view(server: TetherServer, run_id: str) -> dict[str, Any]:
    """What a run used so far, read off its log."""
    graph = await server.runtime.load(run_id)
    return {
        "nodes": graph.completed_count,
        "tokens": graph.tokens_in + graph.tokens_out,
        "cost": graph.cost,
        "wall_ms": graph.wall_ms(),
    }


async def list_runs(request: Request) -> Response:
    server = server_of(request)
    q = request.query_params
    flags = {name: _flag(q.get(name), name) for name in FLAGS}
    where = RunFilter(
        agent=_text(q.get("agent"), "agent"),
        run_id_prefix=_text(q.get("q"), "q"),
        parent_run_id=_text(q.get("parent"), "parent"),
        top_level=flags["top"],
    )
    status = None
    if q.get("status"):
        try:
            status, where = state_filter(q["status"], where)
        except ValueError:
            raise BadRequest(400, "bad_status", f"status must be one of {list(STATES)}") from None
    limit = _int_param(q.get("limit"), "limit", 50, 1, 500)
    offset = _int_param(q.get("offset"), "offset", 0, 0, 10**9)
    rows = await server.store.runs.list(status=status, where=where, limit=limit + 1, offset=offset)
    next_url = None
    if len(rows) > limit:
        given = {k: v for k, v in q.items() if k not in ("limit", "offset") and v != ""}
        next_url = "/v1/runs?" + urlencode({**given, "limit": limit, "offset": offset + limit})
    now = await server.store.runs.clock()
    rows = await with_waiting(server.store, rows[:limit])
    origins = await server.store.forks.origins([info.run_id for info in rows])
    runs = []
    for info in rows:
        view = await _view(server, info, now, usage=flags["usage"], origin=origins.get(info.run_id))
        if flags["children"]:
            children = await server.store.runs.list(
                where=RunFilter(run_id_prefix=info.run_id + "."), limit=MAX_CHILDREN + 1
            )
            # A prefix finds every descendant; a top-level run whose own id happens to
            # extend this one's is not among them.
            children = [c for c in children if c.parent_run_id]
            view["children"] = [
                await _view(server, c, now, usage=flags["usage"]) for c in children[:MAX_CHILDREN]
            ]
            view["children_more"] = len(children) > MAX_CHILDREN
        runs.append(view)
    return JSONResponse({"runs": runs, "next": next_url})


async def _view(
    server: TetherServer, info: RunInfo, now: float, *, usage: bool, origin: Origin | None = None
) -> dict[str, Any]:
    view = row_view(info, now, origin)
    if usage:
        view["usage"] = await usage_view(server, info.run_id)
    return server.publish.view(view, info.run_id)


def _flag(raw: str | None, name: str) -> bool:
    if raw in (None, "", "0", "false"):
        return False
    if raw in ("1", "true"):
        return True
    raise BadRequest(400, f"bad_{name}", f"{name} must be 0 or 1")


def _text(raw: str | None, name: str) -> str | None:
    if raw is None or raw == "":
        return None
    if len(raw) > 400:
        raise BadRequest(400, f"bad_{name}", f"{name} must be at most 400 characters")
    return raw


def _int_param(raw: str | None, name: str, default: int, lo: int, hi: int) -> int:
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(400, f"bad_{name}", f"{name} must be an integer") from None
    if not lo <= value <= hi:
        raise BadRequest(400, f"bad_{name}", f"{name} must be between {lo} and {hi}")
    return value
