"""What an unauthenticated peer can hold: sockets, file descriptors, log volume.

uvicorn's h11 protocol times out a connection only between requests; one that opens and
sends nothing, or sends its headers a byte at a time, is kept forever (each byte even
cancels the keep-alive timer). `GuardedH11` gives every request's headers a deadline
from their first byte (from the connect for the first request). With the concurrency
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
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("tether.server")


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """Timeouts and caps on connections; docs/guides/serving.md documents each default."""

    # Seconds a request's headers may take to arrive, from its first byte (or the connect).
    header_timeout_s: float = 10.0
    # Seconds an idle keep-alive connection stays open between requests.
    idle_timeout_s: float = 5.0
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


class GuardedH11(H11Protocol):
    """h11 with a deadline on each request's headers."""

    _header_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE:
            self._arm()  # part of a request's headers: the deadline set at its first byte holds
        else:
            self._disarm()  # headers complete: the request runs, its body is bounded apart

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
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
