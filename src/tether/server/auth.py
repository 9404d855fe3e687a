"""Bearer-token check on every route but health, as plain ASGI middleware.

The live page cannot put a header on an EventSource, so a GET may also carry the token
in an HttpOnly, SameSite=Strict cookie (set once from `/runs/{id}?token=...`). Only GETs:
a cookie must never authorize a state change another site could trigger.
"""

from __future__ import annotations

import hmac
import json
from http.cookies import SimpleCookie
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Receive, Scope, Send

PUBLIC = frozenset({"/healthz", "/readyz"})
COOKIE = "tether_token"
QUERY_TOKEN_OK = "tether_query_token_ok"


class BearerAuth:
    def __init__(self, app: ASGIApp, token: str) -> None:
        if not token:
            raise ValueError("the API token must not be empty")
        self.app = app
        self._token = token.encode()

    def _ok(self, candidate: str | None) -> bool:
        return candidate is not None and hmac.compare_digest(candidate.encode(), self._token)

    def allowed(self, scope: Scope) -> bool:
        headers = dict(scope["headers"])
        auth = headers.get(b"authorization", b"").decode("latin-1")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and self._ok(value.strip()):
            return True
        if scope["method"] not in ("GET", "HEAD"):
            return False
        if scope["path"].startswith("/runs/"):
            # The page trades ?token= for the cookie: a token given there is judged alone,
            # and the page sets the cookie only when the state says it was right.
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            if "token" in query:
                ok = self._ok(query["token"][-1])
                scope.setdefault("state", {})[QUERY_TOKEN_OK] = ok
                return ok
        cookie = SimpleCookie(headers.get(b"cookie", b"").decode("latin-1"))
        return COOKIE in cookie and self._ok(cookie[COOKIE].value)

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
