"""The web console's routes: the runs list at `/`, a run's page and what it reads.

The list page is a shell with no data; its script asks the API with the token the tab
signed in with. A run's page works with its page-session cookie alone (set from a link
with `?token=` or a sign-in), so it reads its stream, its view (the API's), its sub-agent
runs and its blobs under its own path, where that cookie reaches.
"""

from __future__ import annotations

import html

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from tether.foundation.ids import parent_node_of
from tether.server.detail import run_detail
from tether.server.page import COMMON_JS, asset, missing_run_page, page
from tether.server.request import run_id_of, server_of
from tether.server.session import BEARER_OK, QUERY_TOKEN_OK, page_path
from tether.store.base import RunFilter

MAX_CHILDREN = 500


async def favicon(request: Request) -> Response:
    """The console's icon, public as `/` is: at `/favicon.svg`, which every page links,
    and at `/favicon.ico`, where a browser (or a tool) looks by itself."""
    return Response(
        asset("favicon.svg"),
        media_type="image/svg+xml",
        headers={"Cache-Control": "public, max-age=86400"},
    )


async def console_page(request: Request) -> Response:
    return page("runs.html", {}, scripts=(COMMON_JS, "runs.js"))


async def run_page(request: Request) -> Response:
    server = server_of(request)
    run_id = run_id_of(request)
    state = request.scope.get("state", {})
    if await server.store.runs.get(run_id) is None:
        return missing_run_page(run_id)
    https = request.url.scheme == "https"
    if request.query_params.get("token") and state.get(QUERY_TOKEN_OK):
        # The API token came in the URL (the auth check passed): trade it for a session
        # that can read this run only, and drop the token from the address bar and history.
        response: Response = RedirectResponse(page_path(run_id), status_code=303)
        server.sessions.set_cookie(response, run_id, https=https)
        return response
    response = page(
        "run.html",
        {"title": html.escape(run_id), "run_id_attr": html.escape(run_id, quote=True)},
        scripts=(COMMON_JS, "history.js", "run.js"),
    )
    if state.get(BEARER_OK):  # opened with the header (a sign-in): the page needs the cookie
        server.sessions.set_cookie(response, run_id, https=https)
    return response


async def run_page_view(request: Request) -> Response:
    """What the run's page draws its status word and budget bars from: the run's view as
    `GET /v1/runs/{id}` gives it (`?at=SEQ`: as of that seq), without its nodes, read
    under the page's path where its session cookie reaches."""
    server = server_of(request)
    view = await run_detail(server, run_id_of(request), request.query_params.get("at"), nodes=False)
    return JSONResponse(view)


async def run_children(request: Request) -> Response:
    """The sub-agent runs a run started, each with the node that started it."""
    server = server_of(request)
    run_id = run_id_of(request)
    if await server.store.runs.get(run_id) is None:
        return JSONResponse({"error": {"type": "unknown_run", "message": "no such run"}}, 404)
    rows = await server.store.runs.list(where=RunFilter(parent_run_id=run_id), limit=MAX_CHILDREN)
    children = [
        {
            "run_id": r.run_id,
            "agent": r.agent,
            "status": r.status.value,
            "node_id": parent_node_of(r.run_id, run_id),
            "page": page_path(r.run_id),
        }
        for r in rows
    ]
    return JSONResponse({"children": children})
