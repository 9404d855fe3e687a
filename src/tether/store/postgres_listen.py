"""NOTIFY after appends (coalesced, off the append path), and LISTEN for those notifications."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import asyncpg

from tether.store.base import AppendListener, LogListener
from tether.store.postgres_db import PgPool, close_quietly
from tether.store.queries import load_queries

log = logging.getLogger("tether.store.postgres")

CHANNEL = "tether_log"
# At most one notify statement per this many seconds while appends keep coming: what a
# stream on another replica may wait beyond its append under load, never when idle.
PACE_S = 0.002
Q = load_queries("postgres")


class AppendNotifier:
    """Sends `run_id:seq` on CHANNEL for appends, many per statement, one statement at a time.

    `note()` returns at once: the append has committed and its caller goes on. While one
    notify statement is in flight, later appends gather (a run keeps only its highest
    seq) and go out together in the next: one round trip per batch of appends, whatever
    the concurrency, and never a lock taken in the appends' own commits.

    The notifier has a connection of its own, outside the pool: on a pooled one its
    NOTIFY would queue the executor's next append behind it whenever the pool is busy
    (bench/fencing.py, one connection: 1.6x a bare INSERT at p50 against ~1.1x).
    """

    def __init__(self, db: PgPool) -> None:
        self._db = db
        self._pending: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None
        self._conn: asyncpg.Connection | None = None
        self._next_at = 0.0
        self.sent = 0
        self.statements = 0

    def note(self, run_id: str, seq: int) -> None:
        if seq > self._pending.get(run_id, -1):
            self._pending[run_id] = seq
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._send())

    async def _send(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            # Pacing, not synchronization: after a send, the next waits out PACE_S so that
            # under a stream of appends the statements (and their CPU on the database) stay
            # bounded while batches grow. A first append after a lull goes out at once.
            wait = self._next_at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            self._next_at = loop.time() + PACE_S
            batch, self._pending = self._pending, {}
            payloads = [f"{run_id}:{seq}" for run_id, seq in batch.items()]
            try:
                if self._conn is None or self._conn.is_closed():
                    self._conn = await self._db.connect_one()
                await self._conn.fetchval(Q["notify_appends"], payloads)
            except Exception as exc:
                # Streams fall back to their poll; a lost wakeup delays, never loses, a record.
                log.warning("could not notify %d appends: %s", len(payloads), exc)
                self._drop()
                return
            self.sent += len(payloads)
            self.statements += 1

    def _drop(self) -> None:
        """Forget the connection (the next batch opens another); never blocks."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.terminate()

    async def close(self) -> None:
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
            self._task = None
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await close_quietly(conn)


class PostgresLogListener(LogListener):
    """Calls `on_append(run_id, seq)` for every committed append batch of any process.

    The connection is dedicated: a pooled one would be handed to other queries and its
    LISTEN lost. When it drops, it is reopened with back-off and `on_append(None, -1)`
    tells tailers to read again, since notifications sent meanwhile are gone.
    """

    def __init__(self, db: PgPool, on_append: AppendListener) -> None:
        self._db = db
        self._on_append = on_append
        self._task: asyncio.Task[None] | None = None
        self._listening = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="tether-log-listener")
        ready = asyncio.create_task(self._listening.wait())
        try:
            await asyncio.wait([self._task, ready], return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        if self._task.done():
            self._task.result()  # re-raise why it could not start

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _notified(self, conn: Any, pid: int, channel: str, payload: object) -> None:
        run_id, _, seq = str(payload).rpartition(":")
        try:
            self._on_append(run_id, int(seq))
        except ValueError:
            log.warning("ignoring a malformed %s notification %r", CHANNEL, payload)

    async def _run(self) -> None:
        delay = 0.05
        first = True
        while True:
            try:
                conn = await self._db.connect_one()
            except Exception as exc:
                if first:
                    raise
                log.warning("log listener: reconnect failed (%s); retrying in %.2fs", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            lost = asyncio.Event()
            conn.add_termination_listener(_setter(lost))
            try:
                await conn.add_listener(CHANNEL, self._notified)
                if not first:
                    self._on_append(None, -1)  # appends made while we were away
                first, delay = False, 0.05
                self._listening.set()
                await lost.wait()
                log.warning("log listener: connection lost; reconnecting")
            except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
                log.warning("log listener: %s; reconnecting", exc)
            finally:
                await close_quietly(conn, 2)


def _setter(event: asyncio.Event) -> Any:
    return lambda _conn: event.set()
