"""GET /v1/workers and POST /v1/runs/{run_id}/upgrade (issue 14)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tether.control.deploys import upgrade
from tether.server.listing import urls
from tether.server.request import run_id_of, server_of
from tether.server.schemas import UpgradeRun, parse_body

# Seconds the server holds a run while it checks and moves it.
UPGRADE_TTL = 30.0


async def list_workers(request: Request) -> Response:
    """The live workers of this store: versions served, runs held, last heartbeat."""
    store = server_of(request).store
    now = await store.runs.clock()
    return JSONResponse({"workers": [w.as_dict(now) for w in await store.workers.live()]})


async def upgrade_run(request: Request) -> Response:
    """Move a run to version `to` of its agent's code, which must be the server's and able to
    continue it; 422 (nothing changed) when it is not, 409 while someone executes it."""
    server = server_of(request)
    run_id = run_id_of(request)
    body = parse_body(UpgradeRun, await request.body(), limit=server.limits.max_body_bytes)
    status = await upgrade(server.runtime, run_id, body.to, ttl=UPGRADE_TTL)
    view = {"run_id": run_id, "status": status.value, "agent_version": body.to}
    return JSONResponse({**view, "urls": urls(run_id)})
