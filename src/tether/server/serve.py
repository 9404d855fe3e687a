"""Run a TetherServer on uvicorn until SIGTERM or SIGINT, then drain like the CLI does."""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import Callable

from tether.foundation.errors import TetherError
from tether.server.app import TetherServer
from tether.server.connections import (
    AcceptErrorLog,
    ConnectionLimits,
    TetherConfig,
    raise_open_files_limit,
)
from tether.server.uvicorn_util import ReadyServer, bind_socket


class ServeError(TetherError):
    """The server could not start (port taken, bad host ...)."""


def bind(host: str, port: int) -> socket.socket:
    try:
        return bind_socket(host, port)
    except OSError as exc:
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc


async def serve(
    server: TetherServer,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    on_ready: Callable[[str], None] | None = None,
    log_level: str = "warning",
    stop: asyncio.Event | None = None,
    connections: ConnectionLimits | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT (or `stop` is set, then signals are left alone).

    Then drain the runs executing here, end the streams, and stop uvicorn.
    """
    connections = connections or ConnectionLimits()
    raise_open_files_limit()
    sock = bind(host, port)
    config = TetherConfig(
        server.app,
        limits=connections,
        ws="none",
        lifespan="on",
        access_log=False,
        log_level=log_level,
        log_config=None,
        timeout_graceful_shutdown=5,
    )
    uv = ReadyServer(config)
    loop = asyncio.get_running_loop()
    accept_log = AcceptErrorLog(loop, connections.accept_log_interval_s)
    accept_log.install()
    signals = () if stop is not None else (signal.SIGTERM, signal.SIGINT)
    stop = stop or asyncio.Event()
    for sig in signals:
        # The handler only sets an event; the code below decides the shutdown order.
        loop.add_signal_handler(sig, stop.set)
    serving = asyncio.create_task(uv.serve(sockets=[sock]))
    ready = asyncio.create_task(uv.ready.wait())
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([serving, ready], return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():
            serving.result()
            raise ServeError(f"uvicorn stopped before serving on {host}:{port}")
        bound_host, bound_port = sock.getsockname()[:2]
        url_host = f"[{bound_host}]" if ":" in bound_host else bound_host
        if on_ready is not None:
            on_ready(f"http://{url_host}:{bound_port}")
        await asyncio.wait([serving, stopping], return_when=asyncio.FIRST_COMPLETED)
    finally:
        ready.cancel()
        stopping.cancel()
        try:
            # Runs pause (recorded) and streams end with a retry hint before uvicorn waits
            # for connections: a stream left open would hold the shutdown up.
            await server.close()
            uv.should_exit = True
            await serving
        finally:
            # Only now: a second signal during the drain must not kill the process.
            for sig in signals:
                loop.remove_signal_handler(sig)
            accept_log.uninstall()
            sock.close()
