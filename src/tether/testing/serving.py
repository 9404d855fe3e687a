"""Run the local model server: in-process on the caller's loop, or as a process."""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager

import uvicorn

from tether.foundation.errors import TetherError
from tether.server.uvicorn_util import ReadyServer, bind_socket
from tether.testing.app import LocalModelServer
from tether.testing.scripts import Script
from tether.testing.turns import Turn

_CUT_MESSAGE = "ASGI callable returned without completing response."


class ServerStartError(TetherError):
    """The local model server could not start (port taken, bad host ...)."""


class _HideScriptedCuts(logging.Filter):
    """Drop uvicorn's error line for a response we cut on purpose (a CutStream fault)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != _CUT_MESSAGE


def _bind(host: str, port: int) -> socket.socket:
    try:
        return bind_socket(host, port)
    except OSError as exc:
        raise ServerStartError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc


def _config(server: LocalModelServer, log_level: str) -> uvicorn.Config:
    return uvicorn.Config(
        server.app,
        # h11 everywhere: its behaviour on a cut response is what the faults rely on.
        http="h11",
        ws="none",
        lifespan="off",
        access_log=False,
        log_level=log_level,
        log_config=None,
        # Idle keep-alive connections close at once on shutdown; a client still
        # reading a slow stream may hold it up for at most this long.
        timeout_graceful_shutdown=1,
    )


@asynccontextmanager
async def _serving(
    models: LocalModelServer, host: str, port: int, log_level: str
) -> AsyncIterator[None]:
    """Serve `models` until the block exits; enters the block once uvicorn is ready."""
    if models._base_url is not None:
        raise RuntimeError(f"this LocalModelServer is already serving at {models._base_url}")
    sock = _bind(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    uvicorn_server = ReadyServer(_config(models, log_level))
    cut_filter = _HideScriptedCuts()
    logging.getLogger("uvicorn.error").addFilter(cut_filter)
    # The context manager owns the serving task directly rather than through a
    # TaskGroup: a TaskGroup would wrap every exception raised in the caller's block
    # in an ExceptionGroup, which breaks `pytest.raises` around SDK calls.
    serving = asyncio.create_task(uvicorn_server.serve(sockets=[sock]))
    ready = asyncio.create_task(uvicorn_server.ready.wait())
    try:
        await asyncio.wait([serving, ready], return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():
            serving.result()  # re-raises uvicorn's own error, if it had one
            raise ServerStartError(f"uvicorn stopped before serving on {host}:{port}")
        url_host = f"[{bound_host}]" if ":" in bound_host else bound_host
        models._base_url = f"http://{url_host}:{bound_port}"
        yield
    finally:
        ready.cancel()
        models._base_url = None
        uvicorn_server.should_exit = True
        try:
            await serving
        finally:
            logging.getLogger("uvicorn.error").removeFilter(cut_filter)
            sock.close()


def _models(
    scripts: Mapping[str, Sequence[Turn] | Script] | LocalModelServer | None,
) -> LocalModelServer:
    return scripts if isinstance(scripts, LocalModelServer) else LocalModelServer(scripts)


@asynccontextmanager
async def serve_local_models(
    scripts: Mapping[str, Sequence[Turn] | Script] | LocalModelServer | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    log_level: str = "warning",
) -> AsyncIterator[LocalModelServer]:
    """Serve scripted models on `host:port` (0 picks a free port) for the block's duration.

    Runs uvicorn on the caller's event loop and yields once it has finished starting
    (a handshake, not a sleep); `base_url`, `openai_base_url` and `anthropic_base_url`
    are valid inside the block. Pass a `LocalModelServer` to keep its log afterwards.
    """
    models = _models(scripts)
    async with _serving(models, host, port, log_level):
        yield models


def run_local_models(
    scripts: Mapping[str, Sequence[Turn] | Script] | LocalModelServer,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    on_ready: Callable[[LocalModelServer], None] | None = None,
    log_level: str = "warning",
) -> None:
    """Blocking form for a subprocess: serve until SIGINT or SIGTERM, then return.

    `on_ready(server)` runs once the server accepts requests, e.g. to print the URL a
    parent process waits for.
    """
    models = _models(scripts)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            # The handler only sets an event; leaving the block below stops uvicorn.
            loop.add_signal_handler(sig, stop.set)
        async with _serving(models, host, port, log_level):
            if on_ready is not None:
                on_ready(models)
            await stop.wait()

    asyncio.run(main())
