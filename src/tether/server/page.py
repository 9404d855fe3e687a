"""GET /runs/{run_id}: the live run page, plain HTML, CSS and JS shipped in the package.

The template is filled in one pass (a placeholder's value is never read for more
placeholders), each value escaped for where it goes. The script and the style are
inline and allowed by their hashes, so the page's Content-Security-Policy admits them
and nothing else; the page may only connect to its own origin (its event stream).
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from collections.abc import Callable
from functools import cache
from importlib import resources

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from tether.server.auth import BEARER_OK, QUERY_TOKEN_OK
from tether.server.request import run_id_of, server_of
from tether.server.session import page_path

PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


@cache
def _asset(name: str) -> str:
    return resources.files("tether.server").joinpath("static", name).read_text()


@cache
def _inlined(name: str) -> str:
    """A script or style inlined raw: it must not contain what would end its element."""
    text = _asset(name)
    if "</script" in text.lower() or "</style" in text.lower():
        raise RuntimeError(f"static/{name} contains a closing tag; it cannot be inlined")
    return text


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


@cache
def page_csp() -> str:
    return "; ".join(
        [
            "default-src 'none'",
            f"script-src {_hash(_inlined('run.js'))}",
            f"style-src {_hash(_inlined('run.css'))}",
            "connect-src 'self'",
            "img-src 'self' data:",
            "frame-ancestors 'none'",
            "base-uri 'none'",
            "form-action 'none'",
        ]
    )


def render(template: str, values: dict[str, str]) -> str:
    """Fill `{{name}}` placeholders in one pass; a name without a value is a bug."""
    fill: Callable[[re.Match[str]], str] = lambda m: values[m.group(1)]  # noqa: E731
    return PLACEHOLDER.sub(fill, template)


def _html(body: str, status: int, csp: str) -> HTMLResponse:
    return HTMLResponse(
        body, status, headers={"Cache-Control": "no-store", "Content-Security-Policy": csp}
    )


async def run_page(request: Request) -> Response:
    server = server_of(request)
    run_id = run_id_of(request)
    state = request.scope.get("state", {})
    if await server.store.runs.get(run_id) is None:
        # Said once, plainly: a page that kept retrying an unknown run would never stop.
        text = f"<!doctype html><title>unknown run</title><p>unknown run: no run {html.escape(run_id)} on this server</p>"  # noqa: E501
        return _html(text, 404, "default-src 'none'; frame-ancestors 'none'")
    https = request.url.scheme == "https"
    if request.query_params.get("token") and state.get(QUERY_TOKEN_OK):
        # The API token came in the URL (the auth check passed): trade it for a session
        # that can read this run only, and drop the token from the address bar and history.
        response: Response = RedirectResponse(page_path(run_id), status_code=303)
        server.sessions.set_cookie(response, run_id, https=https)
        return response
    page = render(
        _asset("run.html"),
        {
            "title": html.escape(run_id),
            "run_id_attr": html.escape(run_id, quote=True),
            "css": _inlined("run.css"),
            "js": _inlined("run.js"),
        },
    )
    response = _html(page, 200, page_csp())
    if state.get(BEARER_OK):  # opened with the header: the page's stream needs the cookie
        server.sessions.set_cookie(response, run_id, https=https)
    return response
