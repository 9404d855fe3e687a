"""What every route reads: one server's state (store, launcher, streams' wake-ups, limits,
sessions), apart from the Starlette app that serves it (`tether.server.app`), so routes
depend on this and not on the app that lists them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from tether.blobs import BlobStore
from tether.control.routing import pinned
from tether.engine.follow import Wakeups
from tether.server.events import StreamSettings
from tether.server.launch import Launcher
from tether.server.limits import Limits, StartGate
from tether.server.listing import UsageCache
from tether.server.session import DEFAULT_TTL_S, Sessions
from tether.server.views import Publisher
from tether.store.base import Store


class ServerState:
    """The state behind the routes: store, launcher, wakeups for streams, settings."""

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
        self.store = store
        self.launcher = launcher
        self.runtime = launcher.runtime
        self.blobs = blobs
        # Agent names a caller may start: resolving a name imports a module, so the
        # server never imports what a request names unless it was allowed here.
        self.agents = tuple(agents)
        # The names runs of these agents may be recorded under (theirs, their registries'):
        # the only runs an import may bring in, and that the embedded worker executes.
        self.runnable = frozenset(pinned(self.agents))
        if launcher.worker is not None:
            launcher.worker.routing.pin(self.agents)
        self.streams = streams or StreamSettings()
        self.limits = limits or Limits()
        self.starts = StartGate(self.limits)
        self.sessions = Sessions.for_token(token, session_ttl_s)
        self.publish = Publisher(self.sessions.key)
        self.wakeups = Wakeups()
        self.usage = UsageCache()
        self.closing = asyncio.Event()
        self.streams_open = 0
        self._state = "new"

    @property
    def ready(self) -> bool:
        return self._state == "open" and not self.closing.is_set()
