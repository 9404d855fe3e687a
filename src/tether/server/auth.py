"""Who may call what, as plain ASGI middleware in front of every route but health.

The JSON API and blobs take only `Authorization: Bearer <API token>`; a cookie never
authorizes them, so a script smuggled onto this origin cannot use the browser's
credentials. The live page and what it reads under its own path (`/runs/{id}`, its
`/events`, `/view`, `/children` and `/blobs/{sha256}`) also take a page-session cookie
scoped to that one run (see `tether.server.session`), which the page sets once from
`/runs/{id}?token=...` or a sign-in. Only GETs: a cookie never changes state.

A browser asking for a page without credentials gets the sign-in form (still a 401 with
`WWW-Authenticate: Bearer`); the console's shell at `/` and its icon hold no data and are public.
"""

from __future__ import annotations

import hmac
import json
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Receive, Scope, Send

from tether.server.page import CHALLENGE, sign_in_page
from tether.server.session import BEARER_OK, QUERY_TOKEN_OK, Sessions, run_scope

PUBLIC = frozenset({"/", "/healthz", "/readyz", "/favicon.svg", "/favicon.ico"})
PAGE_PARTS = frozenset({"", "events", "children", "view"})
# Shorter API tokens are refused at start: guessable, and a typo of a real one.
MIN_TOKEN = 16


def check_token(token: str) -> str:
    """`token` if it can be the API token; ValueError saying why not."""
    if len(token) < MIN_TOKEN:
        raise ValueError(
            f"the API token must be at least {MIN_TOKEN} characters (this one has "
            f"{len(token)}); leave it unset and tether serve makes one"
        )
    return token


def page_run_id(path: str) -> tuple[str, str] | None:
    """(run id, part) of a page path: part "" for the page itself, else "events", "view",
    "children" or "blobs"; None for any other path."""
    if not path.startswith("/runs/"):
        return None
    run_id, _, part = path[len("/runs/") :].partition("/")
    if not run_id:
        return None
    if part in PAGE_PARTS:
        return run_id, part
    sha, slash = part.removeprefix("blobs/"), "/" in part.removeprefix("blobs/")
    if part.startswith("blobs/") and sha and not slash:
        return run_id, "blobs"
    return None


class BearerAuth:
    def __init__(self, app: ASGIApp, token: str, sessions: Sessions) -> None:
        check_token(token)
        self.app = app
        self._token = token.encode()
        self.sessions = sessions

    def _ok(self, candidate: str | None) -> bool:
        return candidate is not None and hmac.compare_digest(candidate.encode(), self._token)

    def allowed(self, scope: Scope) -> bool:
        state = scope.setdefault("state", {})
        auth = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                auth = value  # one: __call__ refuses a request with two
        scheme, _, value = auth.decode("latin-1").partition(" ")
        if scheme.lower() == "bearer" and self._ok(value.strip()):
            state[BEARER_OK] = True
            return True
        page = page_run_id(scope["path"])
        if page is None or scope["method"] not in ("GET", "HEAD"):
            return False
        run_id, part = page
        if part == "":
            # The page trades ?token= for its session cookie: a token given there is
            # judged alone, and the page sets the cookie only when the state says so.
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            if "token" in query:
                ok = self._ok(query["token"][-1])
                state[QUERY_TOKEN_OK] = ok
                return ok
        return self.sessions.allows(scope, run_scope(run_id))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC:
            await self.app(scope, receive, send)
            return
        if sum(1 for name, _ in scope["headers"] if name == b"authorization") > 1:
            # Which one counts differs between a proxy and this server: refuse both.
            message = "send one Authorization header, not several"
            await _refuse(send, 400, "duplicate_authorization", message)
            return
        if self.allowed(scope):
            await self.app(scope, receive, send)
            return
        if _wants_page(scope):
            await sign_in_page(scope["state"].get(QUERY_TOKEN_OK) is False)(scope, receive, send)
            return
        message = "missing or wrong bearer token: send Authorization: Bearer <token>"
        await _refuse(send, 401, "unauthorized", message, (b"www-authenticate", CHALLENGE))


async def _refuse(
    send: Send, status: int, kind: str, message: str, *extra: tuple[bytes, bytes]
) -> None:
    body = json.dumps({"error": {"type": kind, "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *extra,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _wants_page(scope: Scope) -> bool:
    """A browser opening a run's page: it gets the sign-in form, not JSON."""
    page = page_run_id(scope["path"])
    if page is None or page[1] != "" or scope["method"] not in ("GET", "HEAD"):
        return False
    accept = b"".join(v for k, v in scope["headers"] if k == b"accept")
    return b"text/html" in accept
