"""Security headers on every response, as the outermost ASGI middleware.

Every response is `nosniff`, never framed, never leaks its URL in a Referer, and is not
cached (API answers carry run data). A response that sets its own
Content-Security-Policy or Cache-Control (the page, a blob, an asset) keeps it; every
other one gets a policy that allows nothing, since JSON is never meant to be a document.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

API_CSP = b"default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

ALWAYS = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
DEFAULTS = (
    (b"content-security-policy", API_CSP),
    (b"cache-control", b"no-store"),
)


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v) for k, v in message.get("headers", []) if k.lower() not in _FORCED
                ]
                present = {k.lower() for k, _ in headers}
                headers.extend(ALWAYS)
                headers.extend((k, v) for k, v in DEFAULTS if k not in present)
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


_FORCED = frozenset(k for k, _ in ALWAYS)
