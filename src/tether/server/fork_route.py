"""POST /v1/runs/{run_id}/fork: a new queued run from a run's history (issue 13)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from tether.server.listing import urls
from tether.server.request import admit_new_run, run_id_of, server_of
from tether.server.schemas import ForkRun, parse_body


async def fork_run(request: Request) -> Response:
    """Fork the run at `at_seq` (or before `before_node`) with `set_outputs` replacing
    recorded outputs and `set_inputs` the inputs of pending nodes; 201 with the fork's id,
    queued for the workers. 404 for an unknown run, 422 (nothing created) for a fork point
    or override the run does not have."""
    server = server_of(request)
    run_id = run_id_of(request)
    await admit_new_run(request)  # a fork queues a run, as a start does
    body = parse_body(ForkRun, await request.body(), limit=server.limits.max_body_bytes)
    # "+N" is counted from what the source had used at the fork point, as the CLI's.
    budget = body.budget.change() if body.budget is not None else None
    fork_id = await server.runtime.fork(
        run_id,
        at_seq=body.at_seq,
        before_node=body.before_node,
        set_outputs=body.set_outputs,
        set_inputs=body.set_inputs,
        budget=budget,
    )
    view = {"run_id": fork_id, "status": "queued", "forked_from": run_id, "urls": urls(fork_id)}
    return JSONResponse(view, 201)
