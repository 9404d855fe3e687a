"""Page sessions: a short-lived token that can read one run's page and stream, nothing else.

The live page cannot put an Authorization header on an EventSource, so it needs a
cookie; that cookie must not be the API token (a cookie goes to every port of the host
and to any script a blob could smuggle in). It is `v1.<scope>.<expiry>.<mac>`, an HMAC
over scope and expiry under a key derived from the API token, so every replica that
shares the token accepts it and nothing else can mint one. Its cookie is HttpOnly,
SameSite=Strict, and its path is the page's own (`/runs/<run id>`), under which the
page's stream lives too; over HTTPS it is Secure with the `__Secure-` prefix.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from dataclasses import dataclass
from urllib.parse import quote

from starlette.responses import Response
from starlette.types import Scope

COOKIE = "tether_page"
SECURE_COOKIE = "__Secure-tether_page"
DEFAULT_TTL_S = 3600.0
# What the auth check found, kept in the request's state for the page route.
QUERY_TOKEN_OK = "tether_query_token_ok"
BEARER_OK = "tether_bearer_ok"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# Values of our cookies one request may offer; more is junk, and each costs an HMAC.
MAX_TRIED = 16


def page_cookies(scope: Scope) -> list[str]:
    """The values of every `tether_page` (or `__Secure-tether_page`) cookie the request
    sends, parsed by hand: `name=value` pairs split on `;`. http.cookies.SimpleCookie stops
    at the first cookie it finds malformed (`foo={"a":1}`, which another app on this host
    may set, since cookies are not kept apart by port) and keeps only the last duplicate."""
    values: list[str] = []
    for name, raw in scope["headers"]:
        if name != b"cookie":
            continue
        for pair in raw.decode("latin-1").split(";"):
            key, eq, value = pair.partition("=")
            if eq and key.strip() in (COOKIE, SECURE_COOKIE):
                value = value.strip()
                if len(value) >= 2 and value[0] == value[-1] == '"':
                    value = value[1:-1]
                values.append(value)
                if len(values) >= MAX_TRIED:
                    return values
    return values


def run_scope(run_id: str) -> str:
    return f"run:{run_id}"


def page_path(run_id: str) -> str:
    """The URL path of a run's page, as a browser sends it (and matches cookie paths)."""
    return "/runs/" + quote(run_id, safe="")


@dataclass(frozen=True, slots=True)
class Sessions:
    """Mints and checks page tokens for one API token."""

    key: bytes
    ttl_s: float = DEFAULT_TTL_S

    @classmethod
    def for_token(cls, api_token: str, ttl_s: float = DEFAULT_TTL_S) -> Sessions:
        key = hmac.new(api_token.encode(), b"tether page session v1", hashlib.sha256).digest()
        return cls(key, ttl_s)

    def _mac(self, scope: str, expires: int) -> str:
        msg = f"v1\n{scope}\n{expires}".encode()
        return _b64(hmac.new(self.key, msg, hashlib.sha256).digest())

    def mint(self, scope: str, *, now: float | None = None) -> str:
        expires = int((now if now is not None else time.time()) + self.ttl_s)
        return f"v1.{_b64(scope.encode())}.{expires}.{self._mac(scope, expires)}"

    def scope_of(self, token: str, *, now: float | None = None) -> str | None:
        """The scope a token grants, or None if it is forged, malformed or expired."""
        parts = token.split(".")
        if len(parts) != 4 or parts[0] != "v1" or not parts[2].isdigit():
            return None
        try:
            scope = _unb64(parts[1]).decode()
        except (ValueError, UnicodeDecodeError):
            return None
        expires = int(parts[2])
        if not hmac.compare_digest(parts[3], self._mac(scope, expires)):
            return None
        if expires < (now if now is not None else time.time()):
            return None
        return scope

    def allows(self, scope: Scope, wanted: str) -> bool:
        """Whether the request carries a page cookie granting `wanted`: every value of
        ours is tried (a neighbour on the same host may set one too, for another run or
        path), and a cookie that is not ours is never parsed beyond its name."""
        return any(self.scope_of(value) == wanted for value in page_cookies(scope))

    def set_cookie(self, response: Response, run_id: str, *, https: bool) -> None:
        response.set_cookie(
            SECURE_COOKIE if https else COOKIE,
            self.mint(run_scope(run_id)),
            max_age=int(self.ttl_s),
            path=page_path(run_id),
            httponly=True,
            samesite="strict",
            secure=https,
        )
