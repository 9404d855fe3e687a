"""GET /v1/workers and POST /v1/runs/{run_id}/upgrade (issue 14)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tether.control.deploys import upgrade
from tether.server.listing import urls
from tether.server.request import run_id_of, server_of
from tether.server.schemas import UpgradeRun, parse_body

# What `tether workers --json` shows the operator on the host, and HTTP callers never see.
HOST_FIELDS = ("host", "pid")
# Seconds the server holds a run while it checks and moves it.
UPGRADE_TTL = 30.0


async def list_workers(request: Request) -> Response:
    """The live workers of this store: versions served, runs held, last heartbeat. Each is
    named by its opaque owner id, as run views name their owner: never its host or pid."""
    server = server_of(request)
    now = await server.store.runs.clock()
    workers = []
    for worker in await server.store.workers.live():
        view = worker.as_dict(now)
        for field in HOST_FIELDS:
            view.pop(field, None)
        view["owner"] = server.publish.owner_id(view["owner"])
        workers.append(view)
    return JSONResponse({"workers": workers})


async def upgrade_run(request: Request) -> Response:
    """Move a run to version `to` of its agent's code, which must be the server's and able to
    continue it; 422 (nothing changed) when it is not, 409 while someone executes it."""
    server = server_of(request)
    run_id = run_id_of(request)
    body = parse_body(UpgradeRun, await request.body(), limit=server.limits.max_body_bytes)
    status = await upgrade(server.runtime, run_id, body.to, ttl=UPGRADE_TTL)
    view = {"run_id": run_id, "status": status.value, "agent_version": body.to}
    return JSONResponse({**view, "urls": urls(run_id)})
