"""A TCP proxy on 127.0.0.1 that can cut connections or partition the network.

It runs its own event loop in a thread, so synchronous test code (and the subprocesses
it starts) can use it. Two faults:

- `cut()` aborts every open connection, both sides (an RST, as when a server or a
  middlebox drops its state): clients see the connection fail at once.
- `blackhole()` is a partition: nothing crosses any more, in either direction, and
  nothing is closed. Connections stay open, new ones are accepted (the kernel completes
  the handshake) and then hear nothing, as when packets are dropped on the way. Bytes
  already sent are held, not lost: `heal()` delivers them, so a statement sent during
  the partition reaches the server afterwards (where the lease fence must refuse it).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class TcpProxy:
    """Forwards 127.0.0.1:`port` to 127.0.0.1:`target_port`."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.cuts = 0
        # Bytes sent during a partition and delivered by its heal (at least the first read
        # of each connection; the rest waits in buffers): statements that arrive late.
        self.held_bytes = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._flowing: asyncio.Event
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    def start(self) -> TcpProxy:
        self._thread.start()
        self._call(self._start())
        return self

    async def _start(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def retarget(self, target_port: int) -> None:
        """Send new connections elsewhere (open ones keep their server)."""
        self.target_port = target_port

    def cut(self) -> int:
        """Abort every open connection; return how many client connections were cut."""
        return self._call(self._cut())

    async def _cut(self) -> int:
        writers, self._writers = self._writers, set()
        for writer in writers:
            writer.transport.abort()
        self.cuts += len(writers) // 2
        return len(writers) // 2

    def blackhole(self) -> None:
        self._call(self._set_flowing(False))

    def heal(self) -> None:
        self._call(self._set_flowing(True))

    async def _set_flowing(self, flowing: bool) -> None:
        if flowing:
            self._flowing.set()
        else:
            self._flowing.clear()

    def close(self) -> None:
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._cut()
        self._flowing.set()
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        await self._flowing.wait()  # a partitioned proxy accepts and then says nothing
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_w.transport.abort()
            return
        self._writers.update((client_w, server_w))
        try:
            await asyncio.gather(self._pump(client_r, server_w), self._pump(server_r, client_w))
        finally:
            for w in (client_w, server_w):
                self._writers.discard(w)
                w.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while True:
                data = await reader.read(65536)
                if not self._flowing.is_set():
                    # A partition that began while this read waited holds the bytes it got.
                    await self._flowing.wait()
                    self.held_bytes += len(data)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        if not writer.is_closing():
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                writer.write_eof()
