"""Serving in tests: an in-process server on a free port, `tether serve` subprocesses, and a
TCP proxy on 127.0.0.1 that cuts every connection after a while."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import tether
from tether.blobs import BlobStore
from tether.engine.runtime import Runtime
from tether.server import Launcher, StreamSettings, TetherServer
from tether.server.limits import Limits
from tether.server.serve import serve
from tether.store.base import Store

TOKEN = "test-token-0123456789"
CHAIN = "tests.server.agents:chain"
FILES = "tests.server.agents:files"
FORGER = "tests.server.agents:forger"
CONSOLE = "tests.server.agents:console"
APPROVAL = "tests.server.agents:approval"
ECHO = "tests.server.agents:echo"
KINDS = "tests.server.agents:kinds"
SRC = Path(tether.__file__).resolve().parent.parent
ROOT = SRC.parent


@contextlib.asynccontextmanager
async def running(
    store: Store,
    *,
    blobs: BlobStore | None = None,
    agents: Sequence[str] = ("demo", CHAIN, FILES, FORGER),
    streams: StreamSettings | None = None,
    workers: str = "embedded",
    lease_ttl: float = 5.0,
    limits: Limits | None = None,
) -> AsyncIterator[tuple[str, TetherServer]]:
    """A server on this event loop at http://127.0.0.1:<free port>, stopped on exit."""
    for name in agents:
        tether.resolve_agent(name)
    runtime = Runtime(store, blobs=blobs, grace=5)
    if workers == "embedded":
        launcher = Launcher.embedded(runtime, lease_ttl=lease_ttl)
    else:
        launcher = Launcher(runtime, lease_ttl=lease_ttl)
    server = TetherServer(
        store, launcher, token=TOKEN, blobs=blobs, agents=agents, streams=streams, limits=limits
    )
    stop = asyncio.Event()
    url: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(server, "127.0.0.1", 0, on_ready=url.set_result, stop=stop))
    await asyncio.wait([task, url], return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
    try:
        yield url.result(), server
    finally:
        stop.set()
        await task


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a `tether` subprocess: this checkout's source on PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(ROOT)])
    env["TETHER_DEMO"] = "1"  # servers and workers here are handed demo runs (--demo)
    env.update(extra or {})
    return env


# Every line a `tether` subprocess printed after its banner, by pid (read by log tests).
OUTPUT: dict[int, list[str]] = {}


@dataclass
class ServerProcess:
    proc: subprocess.Popen[str]
    url: str
    pump: threading.Thread
    banner: str = ""  # the line it said it was ready with

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=timeout)
        self.pump.join(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return code


def start_server(
    home: Path,
    db: str,
    *args: str,
    port: int = 0,
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
    token: str | None = TOKEN,
) -> ServerProcess:
    """`tether serve` as a subprocess; returns once it printed the URL it listens on.
    With `token=None` there is no `--token`: the server reads `env`'s, or makes one."""
    given = ["--token", token] if token is not None else []
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "tether", "--db", db, "--blobs", str(home / "blobs"),
            "serve", "--port", str(port), *given, "--agent", CHAIN, "--agent", "demo",
            *args,
        ],
        cwd=home,
        env=child_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=preexec_fn,
    )  # fmt: skip
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # readiness is a handshake: the server prints its URL
        lines.append(line)
        if line.startswith("tether serve: listening on "):
            url = line.split()[4]
            # Keep draining its output so the pipe never fills and blocks the server.
            return ServerProcess(proc, url, _drain(proc), line)
    raise AssertionError(f"tether serve exited {proc.wait()}:\n{''.join(lines)}")


def start_worker(home: Path, db: str, *args: str) -> ServerProcess:
    """`tether worker` as a subprocess; returns once it says it is ready (url: the db)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "--db", db, "--blobs", str(home / "blobs"), "worker",
         *args],
        cwd=home,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # readiness is a handshake: the worker says it listens
        lines.append(line)
        if line.startswith("worker ") and " ready on " in line:
            return ServerProcess(proc, db, _drain(proc, "worker"))
    raise AssertionError(f"tether worker exited {proc.wait()}:\n{''.join(lines)}")


def _drain(proc: subprocess.Popen[str], name: str = "serve") -> threading.Thread:
    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            OUTPUT.setdefault(proc.pid, []).append(line)
            sys.stderr.write(f"[{name} {proc.pid}] {line}")

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return thread


class CuttingProxy:
    """Forwards 127.0.0.1:<port> to a target and cuts every connection after `cut_after` s.

    Stands in for a gateway with a short timeout (and for a load balancer: `target` can
    be changed between connections).
    """

    def __init__(self, target: str, cut_after: float) -> None:
        host, _, port = target.removeprefix("http://").partition(":")
        self.target = (host, int(port))
        self.cut_after = cut_after
        self.cuts = 0
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> CuttingProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            self._tasks.discard(task)  # type: ignore[arg-type]
            return
        pipes = [
            asyncio.create_task(_pipe(reader, up_writer)),
            asyncio.create_task(_pipe(up_reader, writer)),
        ]
        try:
            _, pending = await asyncio.wait(pipes, timeout=self.cut_after)
            if pending:
                self.cuts += 1
        except asyncio.CancelledError:
            pass  # the proxy is closing; asyncio's server would log a cancelled handler
        finally:
            for p in pipes:
                p.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)
            for w in (writer, up_writer):
                w.transport.abort()  # a cut, not a clean close
            self._tasks.discard(task)  # type: ignore[arg-type]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
