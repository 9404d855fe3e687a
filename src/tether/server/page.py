"""GET /runs/{run_id}: the live run page, plain HTML, CSS and JS shipped in the package."""

from __future__ import annotations

import html
import json
from functools import cache
from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from tether.server.auth import COOKIE, QUERY_TOKEN_OK


@cache
def _asset(name: str) -> str:
    return resources.files("tether.server").joinpath("static", name).read_text()


async def run_page(request: Request) -> Response:
    run_id = request.path_params["run_id"]
    token = request.query_params.get("token")
    if token and request.scope.get("state", {}).get(QUERY_TOKEN_OK):
        # The token came in the URL (the auth check passed): keep it in a cookie the
        # page's EventSource sends, and drop it from the address bar and history.
        response: Response = RedirectResponse(request.url.path, status_code=303)
        response.set_cookie(
            COOKIE,
            token,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
            path="/",
        )
        return response
    page = (
        _asset("run.html")
        .replace("{{title}}", html.escape(run_id))
        # JSON inside <script>: escape "<" so a run id can never close the tag.
        .replace("{{run_id_json}}", json.dumps(run_id).replace("<", "\\u003c"))
        # The assets last, so nothing in them is taken for a placeholder.
        .replace("{{css}}", _asset("run.css"))
        .replace("{{js}}", _asset("run.js"))
    )
    return HTMLResponse(page, headers={"Cache-Control": "no-store"})
