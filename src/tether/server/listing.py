"""GET /v1/runs: a page of runs, filtered, optionally with usage and sub-agent runs.

The console asks for top-level runs with `children=1&usage=1`: each row then carries
what it used so far (from its log) and its sub-agent runs, which the console nests
under it. Plain callers get the rows as the runs table has them, which costs one query.

Usage is read off each run's log, so one request reads at most `MAX_USAGE_LOADS` logs
(a page of 500 runs with 100 sub-agent runs each would read 50,500): the rows past that
carry `"usage": null` and the answer says `"usage_partial": true`. A finished run's usage
never changes, so it is kept (`UsageCache`) and costs no read the next time the console
refreshes.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tether.control.deploys import with_waiting
from tether.server.request import server_of
from tether.server.schemas import BadRequest
from tether.server.session import page_path
from tether.store.base import STATES, RunFilter, RunInfo, state_filter
from tether.store.forks import Origin

if TYPE_CHECKING:
    from tether.server.state import ServerState

# Sub-agent runs shown under one run; a run with more says so with `children_more`.
MAX_CHILDREN = 100
FLAGS = ("top", "usage", "children")
# Logs one request reads for usage; finished runs' usage kept, this many.
MAX_USAGE_LOADS = 200
USAGE_CACHE_SIZE = 10_000


class UsageCache:
    """Finished runs' usage by run id, the most recently used `size` of them."""

    def __init__(self, size: int = USAGE_CACHE_SIZE) -> None:
        self.size = size
        self._kept: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def get(self, run_id: str) -> dict[str, Any] | None:
        usage = self._kept.get(run_id)
        if usage is not None:
            self._kept.move_to_end(run_id)
        return usage

    def keep(self, run_id: str, usage: dict[str, Any]) -> None:
        self._kept[run_id] = usage
        self._kept.move_to_end(run_id)
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)


def run_url(run_id: str) -> str:
    """A run's API path, its id percent-encoded (`/` and every other reserved character)."""
    return "/v1/runs/" + quote(run_id, safe="")


def urls(run_id: str) -> dict[str, str]:
    base = run_url(run_id)
    return {
        "self": base,
        "events": f"{base}/events",
        "cancel": f"{base}/cancel",
        "resume": f"{base}/resume",
        "fork": f"{base}/fork",
        "signals": f"{base}/signals/{{key}}",
        "page": page_path(run_id),
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


async def usage_view(server: ServerState, run_id: str) -> dict[str, Any]:
    """What a run used so far, read off its log."""
    graph = await server.runtime.load(run_id)
    return {
        "nodes": graph.completed_count,
        "tokens": graph.tokens_in + graph.tokens_out,
        "cost": graph.cost,
        "wall_ms": graph.wall_ms(),
    }


class _Usage:
    """Usage for one request's rows: kept ones first, then up to MAX_USAGE_LOADS reads."""

    def __init__(self, server: ServerState) -> None:
        self.server = server
        self.loads = 0
        self.partial = False

    async def of(self, info: RunInfo) -> dict[str, Any] | None:
        kept = self.server.usage.get(info.run_id)
        if kept is not None:
            return kept
        if self.loads >= MAX_USAGE_LOADS:
            self.partial = True
            return None
        self.loads += 1
        usage = await usage_view(self.server, info.run_id)
        if info.status.finished:
            self.server.usage.keep(info.run_id, usage)
        return usage


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
    usage = _Usage(server) if flags["usage"] else None
    runs = []
    for info in rows:
        view = await _view(server, info, now, usage=usage, origin=origins.get(info.run_id))
        if flags["children"]:
            children = await server.store.runs.list(
                where=RunFilter(run_id_prefix=info.run_id + "."), limit=MAX_CHILDREN + 1
            )
            # A prefix finds every descendant; a top-level run whose own id happens to
            # extend this one's is not among them.
            children = [c for c in children if c.parent_run_id]
            view["children"] = [
                await _view(server, c, now, usage=usage) for c in children[:MAX_CHILDREN]
            ]
            view["children_more"] = len(children) > MAX_CHILDREN
        runs.append(view)
    answer: dict[str, Any] = {"runs": runs, "next": next_url}
    if usage is not None:
        answer["usage_partial"] = usage.partial
    return JSONResponse(answer)


async def _view(
    server: ServerState,
    info: RunInfo,
    now: float,
    *,
    usage: _Usage | None,
    origin: Origin | None = None,
) -> dict[str, Any]:
    view = row_view(info, now, origin)
    if usage is not None:
        view["usage"] = await usage.of(info)
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
