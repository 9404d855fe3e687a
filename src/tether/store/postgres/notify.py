"""NOTIFY after appends: coalesced, off the append path, and only while someone listens.

Every notify statement is a transaction with an id of its own, so a commit the server
flushes to disk like an INSERT's: one more fsync every few appends for nobody, when no
event stream (`tether serve`) or `tether logs --follow` listens to the database. So the
notifier counts the log listeners first. A listener names its connection LISTENER_NAME
and, once it listens, says so on HELLO; the notifier listens for that on its own
connection, counts the listeners when it connects and again with each notify statement,
and once a second while it believes nobody listens (a hello can be missed: a pooler, a
reconnect).

While nobody listens, appends are only remembered, for RECENT_S to 2 x RECENT_S: a
listener that starts meanwhile is told about those at once when the notifier learns of
it, so a stream never waits for its poll because its listener was new.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import asyncpg

from tether.store.postgres.db import PgPool, close_quietly
from tether.store.queries import load_queries

log = logging.getLogger("tether.store.postgres")

CHANNEL = "tether_log"
HELLO = "tether_log_hello"
LISTENER_NAME = "tether-log-listener"
# At most one notify statement per this many seconds while appends keep coming: what a
# stream on another replica may wait beyond its append under load, never when idle.
PACE_S = 0.002
# How long appends are remembered while nobody listens, and how often the notifier counts
# the listeners again meanwhile.
RECENT_S = 1.0
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
        # Whether a log listener is connected: None until counted (the next append
        # connects and counts), then kept current by hellos and counts.
        self.listened: bool | None = None
        self._count_at = 0.0  # loop time of the next count while nobody listens
        # Appends while nobody listens: this generation and the one before.
        self._recent: dict[str, int] = {}
        self._older: dict[str, int] = {}
        self._aging: asyncio.TimerHandle | None = None
        self.sent = 0
        self.statements = 0

    def note(self, run_id: str, seq: int) -> None:
        if self.listened is False:
            recent = self._recent
            if seq > recent.get(run_id, -1):
                recent[run_id] = seq
            loop = asyncio.get_running_loop()
            if self._aging is None:
                self._aging = loop.call_later(RECENT_S, self._age)
            if loop.time() < self._count_at:
                return
            self.listened = None  # count again (the task below)
        elif seq > self._pending.get(run_id, -1):
            self._pending[run_id] = seq
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._send())

    def _age(self) -> None:
        """One generation of remembered appends is forgotten."""
        self._older, self._recent = self._recent, {}
        self._aging = None
        if self._older:
            self._aging = asyncio.get_running_loop().call_later(RECENT_S, self._age)

    def _heard(self, listeners: int) -> None:
        """Listeners counted: remember their presence, or tell them what they missed."""
        if not listeners:
            if self.listened is not True:
                self.listened = False
                self._count_at = asyncio.get_running_loop().time() + RECENT_S
            return
        if self.listened is not True:
            self.listened = True
            for remembered in (self._older, self._recent):
                for run_id, seq in remembered.items():
                    if seq > self._pending.get(run_id, -1):
                        self._pending[run_id] = seq
            self._older, self._recent = {}, {}
            if self._aging is not None:
                self._aging.cancel()
                self._aging = None
        if self._pending and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._send())

    def _hello(self, conn: Any, pid: int, channel: str, payload: object) -> None:
        self._heard(1)

    def _lost(self, conn: Any) -> None:
        if conn is self._conn:
            self._conn = None
            if self.listened is not False:
                self.listened = None  # hellos go unheard until the next connection counts

    async def _connect(self) -> asyncpg.Connection:
        # Work scheduled with the append that woke us goes first: a connect spends about a
        # millisecond of this thread before its first wait (asyncpg builds an SSL context
        # for each), and after a resume's first append that work is the run's first node.
        await asyncio.sleep(0)
        conn = await self._db.connect_one()
        try:
            conn.add_termination_listener(self._lost)
            # Listen first, then count: a listener that the count misses says hello after.
            await conn.add_listener(HELLO, self._hello)
            listeners = await conn.fetchval(Q["log_listeners"], LISTENER_NAME)
        except BaseException:
            conn.terminate()
            raise
        self._conn = conn
        self.listened = None
        self._heard(listeners)
        return conn

    async def _send(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending or self.listened is None:
            # Pacing, not synchronization: after a send, the next waits out PACE_S so that
            # under a stream of appends the statements (and their CPU on the database) stay
            # bounded while batches grow. A first append after a lull goes out at once.
            wait = self._next_at - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                conn = self._conn
                if conn is None or conn.is_closed():
                    conn = await self._connect()
                elif self.listened is None:
                    self._heard(await conn.fetchval(Q["log_listeners"], LISTENER_NAME))
                if not self.listened:
                    for run_id, seq in self._pending.items():  # nobody to tell: remember
                        self.note(run_id, seq)
                    self._pending = {}
                    return
                self._next_at = loop.time() + PACE_S
                batch, self._pending = self._pending, {}
                payloads = [f"{run_id}:{seq}" for run_id, seq in batch.items()]
                listeners = await conn.fetchval(Q["notify_appends"], payloads, LISTENER_NAME)
            except Exception as exc:
                # Streams fall back to their poll; a lost wakeup delays, never loses, a record.
                log.warning("could not notify appends: %s", exc)
                self._drop()
                return
            self.sent += len(payloads)
            self.statements += 1
            if not listeners:
                self.listened = None
                self._heard(0)

    def _drop(self) -> None:
        """Forget the connection (the next batch opens another); never blocks."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.terminate()
        self.listened = None

    async def close(self) -> None:
        if self._task is not None:
            with contextlib.suppress(Exception):
                await self._task
            self._task = None
        if self._aging is not None:
            self._aging.cancel()
            self._aging = None
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await close_quietly(conn)
