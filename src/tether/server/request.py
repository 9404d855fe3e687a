"""What every route reads off a request: the server behind the app, a valid run id."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request

from tether.server.schemas import BadRequest

if TYPE_CHECKING:
    from tether.server.state import ServerState


def server_of(request: Request) -> ServerState:
    server: ServerState = request.app.state.tether
    return server


def run_id_of(request: Request) -> str:
    run_id: str = request.path_params["run_id"]
    if not run_id or len(run_id) > 400:
        raise BadRequest(400, "bad_run_id", "run id must be 1 to 400 characters")
    return run_id


def bearer_of(request: Request) -> str:
    """The bearer token the request was let in with (starts take the header only)."""
    return request.headers.get("authorization", "").partition(" ")[2].strip()


async def admit_new_run(request: Request) -> None:
    """A request that queues new runs (a start, a fork, an import) spends one start of its
    token's rate and is refused (429) while `--max-queued` runs wait."""
    server = server_of(request)
    server.starts.take(bearer_of(request))
    await server.starts.check_queue(server.store)
