"""The PostgreSQL connection boundary: the pool, and driver errors turned into tether's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from tether.foundation.errors import StoreError, StoreFull, StoreUnavailable

# SQLSTATEs that mean the server went away or is not accepting us yet: a retry on a
# fresh connection may succeed (admin_shutdown is what pg_terminate_backend sends).
_UNAVAILABLE_STATES = {"57P01", "57P02", "57P03"}

# Pool options read from the URL's query string; the rest of the query goes to the server.
# `statement_cache_size=0` turns asyncpg's named prepared statements off, as PgBouncer in
# transaction mode needs (a named statement lives on one server connection, and the next
# transaction may run on another).
# `group_commit=N`: appends in flight before the next one queues to share a statement with
# other runs' appends (default 2); 0 sends every append alone (e.g. on Citus, where a fence
# over several runs spans shards).
POOL_OPTIONS = (
    "min_size",
    "max_size",
    "command_timeout",
    "statement_cache_size",
    "group_commit",
)
# Seconds a statement may take before the store gives up on its connection. Without a
# bound, a statement on a connection whose packets are dropped (a network partition: no
# RST, no FIN) waits for TCP to give up, which takes hours. Replay of a very large run
# is the slowest statement tether sends; raise it with `?command_timeout=` if needed.
DEFAULT_COMMAND_TIMEOUT = 30.0


def split_url(url: str) -> tuple[str, dict[str, float]]:
    """Return the DSN without tether's pool options, and those options."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    options: dict[str, float] = {}
    for k, v in query:
        if k in POOL_OPTIONS:
            try:
                options[k] = int(v) if k != "command_timeout" else float(v)
            except ValueError:
                raise ValueError(f"postgresql URL: {k}={v!r} is not a number") from None
    rest = [(k, v) for k, v in query if k not in POOL_OPTIONS]
    return urlunsplit(parts._replace(query=urlencode(rest))), options


def describe(url: str) -> str:
    """`host:port/db` of a URL: enough to name it in a message, never the password.

    A multi-host URL (`postgresql://h1:p1,h2:p2/db`, for failover) is named with all
    its hosts.
    """
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]
    if "," not in hosts:
        hosts = f"{parts.hostname or 'localhost'}:{parts.port or 5432}"
    return f"{hosts}{parts.path or '/'}"


def is_unavailable(exc: BaseException) -> bool:
    """True for errors of a lost or refused connection, where a retry may succeed."""
    if isinstance(exc, OSError | TimeoutError | asyncpg.PostgresConnectionError):
        return True
    if isinstance(exc, asyncpg.exceptions.ConnectionDoesNotExistError):
        return True
    if isinstance(exc, asyncpg.InterfaceError) and "connection is closed" in str(exc):
        return True
    return getattr(exc, "sqlstate", None) in _UNAVAILABLE_STATES


@contextmanager
def wrap_errors(where: str) -> Iterator[None]:
    """Turn asyncpg's exceptions into StoreUnavailable (retryable) or StoreError."""
    try:
        yield
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
        if is_unavailable(exc):
            raise unavailable(where, exc) from exc
        raise refused(where, exc) from exc


# disk_full: a data file could not be extended ("No space left on device").
_DISK_FULL = "53100"


def refused(where: str, exc: BaseException) -> StoreError:
    """A statement the server (or the driver) refused, as tether's error: StoreFull for a
    disk with no space left (nothing of the statement landed)."""
    if getattr(exc, "sqlstate", None) == _DISK_FULL:
        # The server's message alone (its HINT, "Check free disk space.", on a line of its
        # own, says less than the error does): a pause reason reads as one line.
        return StoreFull(f"postgresql {where}", getattr(exc, "message", None) or str(exc))
    return StoreError(f"postgresql {where}: {exc}")


@contextmanager
def guard(where: str, conn: asyncpg.Connection | PoolConnectionProxy) -> Iterator[None]:
    """Close `conn` when a statement on it may never be answered; name a lost connection."""
    try:
        yield
    except (TimeoutError, asyncio.CancelledError):
        # The statement's reply may never come (a partition): close the socket now, or
        # releasing the connection waits for a cancellation that cannot reach the server
        # either. The pool (or whoever owns it) opens a fresh one. A pool closing under us
        # may have taken the connection back already: then there is nothing to close, and
        # the cancellation must still propagate.
        with suppress(asyncpg.InterfaceError):
            conn.terminate()
        raise
    except asyncpg.InternalClientError as exc:
        # A server's FATAL (pg_terminate_backend, shutdown) that arrives while asyncpg is
        # between protocol states surfaces as this; the connection is closed and the pool
        # will replace it.
        if conn.is_closed():
            raise unavailable(where, exc) from exc
        raise StoreError(f"postgresql {where}: {exc}") from exc


def unavailable(where: str, exc: BaseException) -> StoreUnavailable:
    return StoreUnavailable(
        f"postgresql {where}: connection lost or refused ({exc}); retry: appends are idempotent"
    )


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Replace asyncpg's `RESET ALL` on release (one more round trip per call).

    The store sets no session state, and asyncpg still rolls back a transaction left
    open before this runs.
    """


class PgPool:
    """The store's connection pool, created by open() and released by close()."""

    def __init__(self, url: str, *, min_size: int | None, max_size: int | None) -> None:
        self.dsn, options = split_url(url)
        self.where = describe(url)
        self.max_size = int(max_size or options.get("max_size", 10))
        self.min_size = int(min(min_size or options.get("min_size", 1), self.max_size))
        self.command_timeout = options.get("command_timeout", DEFAULT_COMMAND_TIMEOUT)
        self.statement_cache_size = int(options.get("statement_cache_size", 100))
        self.group_commit = int(options.get("group_commit", 2))
        self._pool: asyncpg.Pool | None = None

    async def open(self) -> None:
        with wrap_errors(self.where):
            self._pool = await asyncpg.create_pool(
                self.dsn,
                min_size=self.min_size,
                max_size=self.max_size,
                reset=_keep_session,
                command_timeout=self.command_timeout,
                statement_cache_size=self.statement_cache_size,
            )

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[PoolConnectionProxy]:
        """A pooled connection; driver errors in the block come out as tether's."""
        if self._pool is None:
            raise StoreError(f"postgresql {self.where}: the store is not open (call open())")
        with wrap_errors(self.where):
            async with self._pool.acquire() as conn:
                with guard(self.where, conn):
                    yield conn

    @property
    def is_open(self) -> bool:
        return self._pool is not None

    async def execute(self, sql: str, *args: Any) -> str:
        async with self.connection() as conn:
            return await conn.execute(sql, *args)

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        async with self.connection() as conn:
            return await conn.fetch(sql, *args)

    async def connect_one(
        self, *, bounded: bool = True, name: str | None = None
    ) -> asyncpg.Connection:
        """A connection outside the pool (migrations hold one for a whole transaction).

        `bounded=False` leaves its statements without a timeout: a migration of a large
        table may rightly take longer than any statement on the hot path. `name`: its
        application_name, as others see it in pg_stat_activity.
        """
        timeout = self.command_timeout if bounded else None
        with wrap_errors(self.where):
            return await asyncpg.connect(
                self.dsn,
                command_timeout=timeout,
                statement_cache_size=self.statement_cache_size,
                server_settings={"application_name": name} if name else None,
            )


async def close_quietly(conn: asyncpg.Connection, within_s: float = 5.0) -> None:
    """Close a connection of our own politely, or drop it if the server does not answer."""
    if conn.is_closed():
        return
    try:
        await asyncio.wait_for(conn.close(), within_s)
    except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
        conn.terminate()


def rowcount(status: str) -> int:
    """Rows affected, from a command tag such as `INSERT 0 3` or `UPDATE 1`."""
    return int(status.rsplit(" ", 1)[-1])
