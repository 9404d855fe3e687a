"""The HTTP server: one TetherServer per process, stateless between requests.

Everything a request needs is in the store (runs, log) and the blob store, so any
number of replicas can sit behind a load balancer; the only per-process state is the
runs this process executes (embedded mode) and the streams it holds open.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence

from starlette.applications import Starlette
from starlette.middleware import Middleware

from tether.blobs import BlobStore
from tether.control.metering import metering
from tether.server.auth import BearerAuth
from tether.server.connections import CloseUnreadBodies
from tether.server.events import StreamSettings
from tether.server.headers import SecurityHeaders
from tether.server.launch import Launcher
from tether.server.limits import BodyLimit, Limits
from tether.server.routes import exception_handlers, routes
from tether.server.session import DEFAULT_TTL_S
from tether.server.state import ServerState
from tether.store.base import LogListener, Store


class TetherServer(ServerState):
    """A server: its state (`ServerState`), the Starlette app over it, and its lifespan."""

    def __init__(
        self,
        store: Store,
        launcher: Launcher,
        *,
        token: str,
        blobs: BlobStore | None = None,
        agents: Sequence[str] = ("demo",),
        streams: StreamSettings | None = None,
        limits: Limits | None = None,
        session_ttl_s: float = DEFAULT_TTL_S,
    ) -> None:
        super().__init__(
            store,
            launcher,
            token=token,
            blobs=blobs,
            agents=agents,
            streams=streams,
            limits=limits,
            session_ttl_s=session_ttl_s,
        )
        self._listener: LogListener | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._metrics: contextlib.AbstractAsyncContextManager[None] | None = None
        self.app = Starlette(
            routes=routes(),
            # Outermost first: every answer (a 401, a 413 too) gets the security headers,
            # and a body is bounded before anything reads it.
            middleware=[
                Middleware(SecurityHeaders),
                Middleware(CloseUnreadBodies),
                Middleware(
                    BodyLimit,
                    limit=self.limits.max_body_bytes,
                    by_path={"/v1/runs/import": self.limits.max_import_bytes},
                ),
                Middleware(BearerAuth, token=token, sessions=self.sessions),
            ],
            lifespan=self._lifespan,
            exception_handlers=exception_handlers(),
        )
        self.app.state.tether = self

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await self.open()
        try:
            yield
        finally:
            await self.close()

    async def open(self) -> None:
        """Listen for appends, then let the launcher take up its runs."""
        if self._state != "new":
            return
        self._state = "opening"
        self._unsubscribe = self.runtime.events.on_record(self.wakeups.on_record)
        self._metrics = metering(self.runtime, lambda: self.streams_open)
        await self._metrics.__aenter__()
        self._listener = self.store.log.listener(self.wakeups.on_append)
        if self._listener is not None:
            await self._listener.start()
        await self.launcher.open()
        self._state = "open"

    async def close(self) -> None:
        """Drain runs executing here (they pause, recorded), then end the open streams."""
        if self._state in ("closing", "closed"):
            return
        self._state = "closing"
        try:
            await self.launcher.close()
        finally:
            self.closing.set()
            if self._listener is not None:
                await self._listener.close()
            if self._unsubscribe is not None:
                self._unsubscribe()
            if self._metrics is not None:
                await self._metrics.__aexit__(None, None, None)
            self._state = "closed"
