"""GET /v1/runs/{run_id}/export and POST /v1/runs/import: runs as `.tlog` files (issue 13)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from tether.ops.tlog import export_run
from tether.ops.tlog.load import check_agents, read_tlog
from tether.ops.tlog.load import import_tlog as load_tlog
from tether.server.request import admit_new_run, run_id_of, server_of

TLOG_MEDIA_TYPE = "application/vnd.tether.tlog"


async def export_tlog(request: Request) -> Response:
    """The run, its sub-agent runs and (with `?blobs=true`) their blobs as a `.tlog` file,
    streamed as it is written. 404 for an unknown run, 422 for a sub-agent run."""
    server = server_of(request)
    run_id = run_id_of(request)
    with_blobs = request.query_params.get("blobs", "").lower() in ("1", "true", "yes")
    chunks = export_run(server.store, run_id, blobs=server.blobs if with_blobs else None)
    # The first chunk is taken before answering: an unknown run is a 404, not a broken body.
    first = await anext(chunks)

    async def body() -> AsyncIterator[bytes]:
        yield first
        async for chunk in chunks:
            yield chunk

    disposition = f'attachment; filename="{run_id}.tlog"'
    return StreamingResponse(
        body(), media_type=TLOG_MEDIA_TYPE, headers={"Content-Disposition": disposition}
    )


async def import_tlog(request: Request) -> Response:
    """Import the `.tlog` file in the body into this server's store, all or nothing: 201
    with the runs created, 200 if the store had them already; 422 (bad_tlog) naming what is
    wrong with the file, 422 (unknown_agent) naming a run of an agent not served here,
    409 (import_conflict) for a different run under one of its ids."""
    server = server_of(request)
    await admit_new_run(request)  # an import queues runs, as a start does
    source = "the request body"
    tlog = await read_tlog(source, request.stream())
    # Refused whole, before anything is written, if any of its runs would run an agent this
    # server was not started with (422 unknown_agent).
    check_agents(source, tlog, server.runnable)
    done = await load_tlog(server.store, tlog, blobs=server.blobs, source=source)
    view = {
        "run_id": done.run_id,
        "created": done.created,
        "records": done.records,
        "blobs": done.blobs,
        "already": done.already,
    }
    return JSONResponse(view, 200 if done.already else 201)
