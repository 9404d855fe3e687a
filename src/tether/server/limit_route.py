"""GET/PUT/DELETE /v1/limits: the concurrency limits workers' claims enforce (issue 16)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tether.ops.concurrency import limit_view, limit_views, remove_limit, set_limit
from tether.server.request import server_of
from tether.server.schemas import BadRequest, SetLimit, parse_body
from tether.store.limits import ConcurrencyLimit


def _served(request: Request, agent: str) -> None:
    agents = server_of(request).agents
    if agent not in agents:
        raise BadRequest(
            422,
            "unknown_agent",
            f"agent {agent!r} is not served here; this server runs {list(agents)}",
        )


async def list_limits(request: Request) -> Response:
    """Every concurrency limit, with the runs holding its slots now."""
    return JSONResponse({"limits": await limit_views(server_of(request).store)})


async def put_limit(request: Request) -> Response:
    """Set the limit of one scope (an agent, one of its keys, or each key); 200 with it.
    422 (nothing stored) for a limit below 1, a key with each_key, or an unknown agent."""
    server = server_of(request)
    body = parse_body(SetLimit, await request.body(), limit=server.limits.max_body_bytes)
    _served(request, body.agent)
    limit = ConcurrencyLimit(body.agent, body.max_running, body.key, body.each_key)
    await set_limit(server.store, limit)
    return JSONResponse(limit_view(limit, await server.store.limits.held(limit.agent)))


async def delete_limit(request: Request) -> Response:
    """Lift the limit of `?agent=A[&key=K | &each_key=1]`; its waiting runs are claimable at
    once. 404 if that scope has none."""
    q = request.query_params
    agent, key, each = q.get("agent"), q.get("key") or None, q.get("each_key") in ("1", "true")
    if not agent:
        raise BadRequest(400, "bad_agent", "give ?agent=A (and ?key=K or ?each_key=1)")
    scope = await remove_limit(server_of(request).store, agent, key, each_key=each)
    return JSONResponse({"scope": scope, "removed": True})
