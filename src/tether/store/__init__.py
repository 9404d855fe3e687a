"""Log and run stores, chosen by URL."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from tether.store.base import (
    DRAIN,
    EVERY_RUN,
    ORPHANED,
    STATES,
    Claim,
    Leases,
    LogStore,
    Renewal,
    RunFilter,
    RunInfo,
    RunTable,
    Status,
    Store,
    state_filter,
)

DEFAULT_DATA_DIR = ".tether"
DATA_DIR_ENV = "TETHER_DATA_DIR"
DATABASE_URL_ENV = "TETHER_DATABASE_URL"


def data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The embedded default's data directory: `$TETHER_DATA_DIR` in `environ` (default: the
    process's environment, for code that opens a store without the command's settings),
    else ./.tether."""
    env = os.environ if environ is None else environ
    return Path(env.get(DATA_DIR_ENV, DEFAULT_DATA_DIR))


def default_url(environ: Mapping[str, str] | None = None) -> str:
    """`$TETHER_DATABASE_URL` in `environ` (default: the process's environment), else a
    SQLite file in the data directory. `tether.control.settings` passes its own."""
    env = os.environ if environ is None else environ
    return env.get(DATABASE_URL_ENV) or f"sqlite:///{data_dir(env) / 'tether.db'}"


def store_url(given: str) -> str:
    """A store as `--db` gives it: a URL (`sqlite:///…`, `postgresql://…`) as is; anything
    else is a SQLite file's path, as `sqlite3 PATH` takes it, or a directory (an existing
    one, or a path ending in `/`) meaning `tether.db` inside it. Anything that starts like
    a URL (`scheme:`) stays one, so a mistyped URL is refused as such."""
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", given):
        return given
    path = Path(given).expanduser()
    if path.is_dir() or given.endswith(("/", os.sep)):
        path = path / "tether.db"
    return f"sqlite:///{path}"


def _check_ports(url: str) -> None:
    """ValueError naming the URL if a host's port (of one, or of several: `h1:p1,h2:p2`) is
    not a number, said here rather than by the driver's message without the URL."""
    for host in urlsplit(url).netloc.rpartition("@")[2].split(","):
        _, colon, port = host.rpartition(":")
        if colon and not port.isdigit() and not host.endswith("]"):
            raise ValueError(
                f"malformed store URL {url.split('@')[-1]!r}: port {port!r} is not a number"
            )


def store_from_url(url: str | None = None) -> Store:
    """Build (not open) the store for a URL: `sqlite:///path` or `postgresql://...`."""
    url = url or default_url()
    if url.startswith("sqlite:///"):
        from tether.store.sqlite import SqliteStore

        return SqliteStore(url.removeprefix("sqlite:///"))
    if url == "memory:":
        from tether.store.memory import MemoryStore

        return MemoryStore()
    if url.startswith(("postgresql://", "postgres://")):
        _check_ports(url)
        try:
            from tether.store.postgres import PostgresStore  # type: ignore[import-not-found,unused-ignore]
        except ImportError as exc:  # the extra is not installed
            raise ImportError(
                f"{url.split('@')[-1]}: PostgreSQL support needs `pip install 'tether[postgres]'`"
            ) from exc
        store: Store = PostgresStore(url)
        return store
    raise ValueError(
        f"unsupported store URL {url!r}: use sqlite:///path/to/file.db or postgresql://host/db"
    )


async def migrate_url(url: str | None = None, *, partitions: int | None = None) -> list[str]:
    """Bring the store at `url` to the current schema (`tether db migrate`); return what ran.

    `partitions` (PostgreSQL only) then rebuilds the run log with that many hash partitions
    by run_id (1: one plain table); "partitions N" is listed among what ran if it changed.
    """
    store = store_from_url(url)
    try:
        applied = await store.migrate()
        if partitions is not None:
            from tether.store.postgres import PostgresStore

            if not isinstance(store, PostgresStore):
                raise ValueError("--partitions needs a postgresql:// store")
            if await store.partition_log(partitions):
                applied.append(f"partitions {partitions}")
        return applied
    finally:
        await store.close()


__all__ = [
    "DATABASE_URL_ENV",
    "DATA_DIR_ENV",
    "DRAIN",
    "EVERY_RUN",
    "ORPHANED",
    "STATES",
    "Claim",
    "Leases",
    "LogStore",
    "Renewal",
    "RunFilter",
    "RunInfo",
    "RunTable",
    "Status",
    "Store",
    "data_dir",
    "default_url",
    "migrate_url",
    "state_filter",
    "store_from_url",
    "store_url",
]
