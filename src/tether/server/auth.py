"""Who may call what, as plain ASGI middleware in front of every route but health.

The JSON API and blobs take only `Authorization: Bearer <API token>`; a cookie never
authorizes them, so a script smuggled onto this origin cannot use the browser's
credentials. The live page and its own stream (`/runs/{id}`, `/runs/{id}/events`) also
take a page-session cookie scoped to that one run (see `tether.server.session`), which the
page sets once from `/runs/{id}?token=...`. Only GETs: a cookie never changes state.
"""

from __future__ import annotations

import hmac
import json
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Receive, Scope, Send

from tether.server.session import Sessions, run_scope

PUBLIC = frozenset({"/healthz", "/readyz"})
QUERY_TOKEN_OK = "tether_query_token_ok"
BEARER_OK = "tether_bearer_ok"
PAGE_STREAM = "/events"


def page_run_id(path: str) -> str | None:
    """The run a page path (`/runs/{id}` or `/runs/{id}/events`) is about, else None."""
    if not path.startswith("/runs/"):
        return None
    rest = path[len("/runs/") :].removesuffix(PAGE_STREAM)
    return rest if rest and "/" not in rest else None


class BearerAuth:
    def __init__(self, app: ASGIApp, token: str, sessions: Sessions) -> None:
        if not token:
            raise ValueError("the API token must not be empty")
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
                auth = value
        scheme, _, value = auth.decode("latin-1").partition(" ")
        if scheme.lower() == "bearer" and self._ok(value.strip()):
            state[BEARER_OK] = True
            return True
        run_id = page_run_id(scope["path"])
        if run_id is None or scope["method"] not in ("GET", "HEAD"):
            return False
        if not scope["path"].endswith(PAGE_STREAM):
            # The page trades ?token= for its session cookie: a token given there is
            # judged alone, and the page sets the cookie only when the state says so.
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            if "token" in query:
                ok = self._ok(query["token"][-1])
                state[QUERY_TOKEN_OK] = ok
                return ok
        return self.sessions.allows(scope, run_scope(run_id))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in PUBLIC or self.allowed(scope):
            await self.app(scope, receive, send)
            return
        body = json.dumps(
            {
                "error": {
                    "type": "unauthorized",
                    "message": "missing or wrong bearer token: send Authorization: Bearer <token>",
                }
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="tether"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
