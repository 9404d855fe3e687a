"""What an unauthenticated peer can hold: sockets, file descriptors, log volume.

uvicorn's h11 protocol times out a connection only between requests; one that opens and
sends nothing, or sends its headers or its body a byte at a time, is kept forever (each
byte even cancels the keep-alive timer, after an answer too). `GuardedH11` gives every
request's headers a deadline from their first byte (from the connect for the first
request), and its body two: one in total from the headers, one between two reads (while
the app waits for bytes, not while it is too busy to take them). An answer given before
the body was read closes the connection (`CloseUnreadBodies`), so a 401 to a peer that
trickles a declared 100 kB body ends it at once. With the concurrency
limit and the open-file limit raised to its hard ceiling, a slow-loris peer cannot
starve `/healthz`; and when accept() does run out of descriptors, the log says so once
per interval instead of a traceback per retry.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from dataclasses import dataclass
from typing import Any

import h11
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("tether.server")


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Timeouts and caps on connections; docs/guides/serving.md documents each default."""

    # Seconds a request's headers may take to arrive, from its first byte (or the connect).
    header_timeout_s: float = 10.0
    # Seconds an idle keep-alive connection stays open between requests.
    idle_timeout_s: float = 5.0
    # Seconds a request's body may take in all, from its headers (a 64 MiB import at
    # about 1 MB/s), and may send nothing while the app waits for it.
    body_timeout_s: float = 60.0
    body_read_timeout_s: float = 10.0
    # Connections (and requests) at once; beyond it requests get 503. Each open event
    # stream holds one, so this is also the number of live pages and followers.
    max_connections: int = 1000
    # accept() failures (EMFILE ...) are logged at most once per this many seconds.
    accept_log_interval_s: float = 10.0


class TetherConfig(uvicorn.Config):
    """uvicorn's config plus what GuardedH11 reads."""

    def __init__(self, app: Any, *, limits: ConnectionLimits, **kw: Any) -> None:
        super().__init__(
            app,
            http=GuardedH11,
            timeout_keep_alive=max(1, round(limits.idle_timeout_s)),
            # uvicorn refuses a request once open connections (its own included) reach
            # the limit: +1 lets exactly max_connections be served at once.
            limit_concurrency=limits.max_connections + 1,
            **kw,
        )
        self.header_timeout_s = limits.header_timeout_s
        self.body_timeout_s = limits.body_timeout_s
        self.body_read_timeout_s = limits.body_read_timeout_s


class GuardedH11(H11Protocol):
    """h11 with a deadline on each request's headers, and two on its body."""

    _header_deadline: asyncio.TimerHandle | None = None
    _body_deadline: asyncio.TimerHandle | None = None
    _read_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        state = self.conn.their_state
        if state is h11.IDLE:
            self._arm()  # part of a request's headers: the deadline set at its first byte holds
            return
        self._disarm()  # headers complete: the request runs
        if state is h11.SEND_BODY:
            self._arm_body()
        else:
            self._disarm_body()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._disarm_body()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._header_deadline is None and not self.transport.is_closing():
            timeout: float = getattr(self.config, "header_timeout_s", 10.0)
            self._header_deadline = self.loop.call_later(timeout, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        busy = self.cycle is not None and not self.cycle.response_complete
        if self.conn.their_state is h11.IDLE and not busy and not self.transport.is_closing():
            self.transport.close()

    def _arm_body(self) -> None:
        """The body's total deadline, once from its headers; the one between reads, anew."""
        if self.transport.is_closing():
            return
        if self._body_deadline is None:
            total: float = getattr(self.config, "body_timeout_s", 60.0)
            self._body_deadline = self.loop.call_later(total, self._body_too_slow, "total")
        if self._read_deadline is not None:
            self._read_deadline.cancel()
        per_read: float = getattr(self.config, "body_read_timeout_s", 10.0)
        self._read_deadline = self.loop.call_later(per_read, self._body_too_slow, "read")

    def _disarm_body(self) -> None:
        for timer in (self._body_deadline, self._read_deadline):
            if timer is not None:
                timer.cancel()
        self._body_deadline = self._read_deadline = None

    def _body_too_slow(self, which: str) -> None:
        if which == "total":
            self._body_deadline = None
        else:
            self._read_deadline = None
        if self.conn.their_state is not h11.SEND_BODY or self.transport.is_closing():
            return
        if which == "read" and self.flow.read_paused:
            # Nothing came because the app has not taken what came: not the peer's delay.
            self._arm_body()
            return
        log.info("closing a connection: its request body was too slow (%s deadline)", which)
        self._disarm_body()
        self.transport.close()


class CloseUnreadBodies:
    """ASGI middleware: an answer given before the request's body was read (a 401, a 4xx
    decided from the headers) says `Connection: close`, so the server closes the connection
    after it instead of keeping it for the rest of a body nobody will read."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _has_body(scope):
            await self.app(scope, receive, send)
            return
        read = False

        async def reading() -> Message:
            nonlocal read
            message = await receive()
            if message["type"] == "http.disconnect" or not message.get("more_body", False):
                read = True
            return message

        async def answering(message: Message) -> None:
            if message["type"] == "http.response.start" and not read:
                headers = [(k, v) for k, v in message.get("headers", []) if k != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, reading, answering)


def _has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value != b"0"):
            return True
    return False


def raise_open_files_limit() -> tuple[int, int]:
    """Raise RLIMIT_NOFILE's soft limit to its hard limit; return (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, exc)
            return soft, soft
        return soft, target
    return soft, soft


class AcceptErrorLog:
    """A loop exception handler that reports failed accepts once per interval.

    asyncio retries accept() every second after EMFILE and logs each failure with its
    traceback; under a connection flood that is megabytes of log a minute.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, interval_s: float) -> None:
        self._loop = loop
        self._previous = loop.get_exception_handler()
        self.interval_s = interval_s
        self._last = -float("inf")
        self.suppressed = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if "accept" not in str(context.get("message", "")):
            if self._previous is not None:
                self._previous(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        now = time.monotonic()
        if now - self._last < self.interval_s:
            self.suppressed += 1
            return
        self._last = now
        more = f" ({self.suppressed} more since the last report)" if self.suppressed else ""
        self.suppressed = 0
        log.error(
            "accepting connections failed: %s%s; raise the open-file limit or "
            "lower --max-connections",
            context.get("exception") or context.get("message"),
            more,
        )

    def install(self) -> None:
        self._loop.set_exception_handler(self)

    def uninstall(self) -> None:
        self._loop.set_exception_handler(self._previous)
