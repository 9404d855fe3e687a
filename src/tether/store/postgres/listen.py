"""LISTEN for the notifications of appends (store/postgres_notify.py sends them)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import asyncpg

from tether.store.base import AppendListener, LogListener
from tether.store.postgres.db import PgPool, close_quietly
from tether.store.postgres.notify import CHANNEL, LISTENER_NAME
from tether.store.queries import load_queries

log = logging.getLogger("tether.store.postgres")

Q = load_queries("postgres")


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
                conn = await self._db.connect_one(name=LISTENER_NAME)
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
                await conn.fetchval(Q["log_listener_hello"])  # notifiers: someone listens
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
