"""uvicorn in-process: readiness as a handshake, our own signals, a socket bound up front."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn


class ReadyServer(uvicorn.Server):
    """uvicorn that reports readiness through an event and leaves signals to its owner."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self.ready.set()

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The owner of the event loop owns SIGINT/SIGTERM (e.g. to drain runs first);
        # uvicorn replacing the handlers would steal them.
        yield


def bind_socket(host: str, port: int, *, backlog: int = 1024) -> socket.socket:
    """Bind the listening socket ourselves so port 0 resolves before serving (OSError if not)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(backlog)
    sock.setblocking(False)
    return sock
