"""GET/POST /v1/schedules and DELETE /v1/schedules/{name} (issue 16)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tether.ops.schedules import view
from tether.server.request import server_of
from tether.server.schemas import AddSchedule, BadRequest, parse_body


async def list_schedules(request: Request) -> Response:
    """Every schedule of this store, by name, with its next fire time."""
    schedules = await server_of(request).runtime.schedules.all()
    return JSONResponse({"schedules": [view(s) for s in schedules]})


async def add_schedule(request: Request) -> Response:
    """Add a schedule of an agent this server runs; 201 with it. 422 (nothing stored) for a
    bad name, cron expression, time zone or input; 409 for a name taken."""
    server = server_of(request)
    body = parse_body(AddSchedule, await request.body(), limit=server.limits.max_body_bytes)
    if body.agent not in server.agents:
        raise BadRequest(
            422,
            "unknown_agent",
            f"agent {body.agent!r} is not served here; this server runs {list(server.agents)}",
        )
    schedule = await server.runtime.schedules.add(
        body.name,
        cron_expr=body.cron,
        agent=body.agent,
        input=body.input,
        timezone=body.timezone,
        catch_up=body.catch_up,
    )
    return JSONResponse(view(schedule), 201)


async def remove_schedule(request: Request) -> Response:
    """Stop a schedule (the runs it queued stay); 404 if there is none by that name."""
    name = request.path_params["name"]
    await server_of(request).runtime.schedules.remove(name)
    return JSONResponse({"name": name, "removed": True})
