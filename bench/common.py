"""What every benchmark family shares: result lines, settings, percentiles and stores."""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from tether.model.records import decode_one
from tether.store import Store, store_from_url
from tether.store.base import LogStore

PG_ADMIN_URL = os.environ.get(
    "TETHER_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
# One database per bench process: two runs at once (a full run and a quick one) never
# drop each other's tables.
BENCH_DB = f"tether_bench_{os.getpid()}"


@dataclass(frozen=True, slots=True)
class Settings:
    """One invocation's settings: `quick` shrinks every size, `workdir` holds SQLite files."""

    quick: bool
    workdir: Path
    pg_admin_url: str = PG_ADMIN_URL

    @property
    def pg_url(self) -> str:
        return urlunsplit(urlsplit(self.pg_admin_url)._replace(path=f"/{BENCH_DB}"))

    def size(self, quick: int, full: int) -> int:
        return quick if self.quick else full


@dataclass(slots=True)
class Line:
    """One table line: a measured value against a floor measured in the same run."""

    family: str
    what: str
    value: float
    unit: str
    floor_name: str
    floor: float | None
    target: str = "-"
    ok: bool | None = None  # None: no target, the line informs
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        return self.value / self.floor if self.floor else None

    @property
    def verdict(self) -> str:
        return "info" if self.ok is None else ("pass" if self.ok else "MISS")

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ratio"] = self.ratio
        d["verdict"] = self.verdict
        return d


def pct(samples: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of samples, nearest rank."""
    s = sorted(samples)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def p50(samples: Sequence[float]) -> float:
    return pct(samples, 0.5)


@dataclass(frozen=True, slots=True)
class Append:
    """One `log.append` call as the executor made it."""

    seconds: float
    run_id: str
    # As the executor passed them: taking the records out here would be CPU counted
    # against the process in the throughput family.
    entries: Sequence[tuple[int, bytes]]

    @property
    def records(self) -> tuple[bytes, ...]:
        return tuple(r for _, r in self.entries)

    @property
    def rows(self) -> int:
        return len(self.entries)

    @property
    def nbytes(self) -> int:
        return sum(map(len, self.records))

    @property
    def bodies(self) -> list[str]:
        return [str(decode_one(self.run_id, 0, r).WhichOneof("body")) for r in self.records]


class TimedLog(LogStore):
    """Wraps a store's log and times each append call (the executor's checkpoint)."""

    def __init__(self, inner: LogStore) -> None:
        self.inner = inner
        self.appends: list[Append] = []

    async def append(
        self, run_id: str, entries: Sequence[tuple[int, bytes]], *, epoch: int | None = None
    ) -> None:
        t0 = time.perf_counter()
        await self.inner.append(run_id, entries, epoch=epoch)
        dt = time.perf_counter() - t0
        self.appends.append(Append(dt, run_id, entries))

    async def read(self, run_id: str, *, after_seq: int = -1) -> list[tuple[int, bytes]]:
        return await self.inner.read(run_id, after_seq=after_seq)

    async def read_all(self, run_id: str) -> list[bytes]:
        return await self.inner.read_all(run_id)

    def node_appends(self) -> list[Append]:
        """Appends that carried node records only (not run started/finished/resumed)."""
        return [a for a in self.appends if all(b.startswith("node_") for b in a.bodies)]


def timed_log(store: Store) -> TimedLog:
    """Put a TimedLog in front of the store's log; the runtime appends through it."""
    log = TimedLog(store.log)
    store.log = log
    return log


async def prepare_pg(settings: Settings) -> None:
    """Create this process's bench database afresh."""
    await _admin(settings, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
    await _admin(settings, f"CREATE DATABASE {BENCH_DB}")


async def drop_pg(settings: Settings) -> None:
    """Drop this process's bench database."""
    await _admin(settings, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")


async def _admin(settings: Settings, sql: str) -> None:
    conn = await asyncpg.connect(settings.pg_admin_url, timeout=10)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def open_pg(settings: Settings) -> Store:
    """The PostgreSQL store on the bench database, migrated, with empty tables."""
    store = store_from_url(settings.pg_url)
    await store.open()
    await pg_pool(store).execute("TRUNCATE run_log, runs, run_refs, run_forks")
    return store


def pg_pool(store: Store) -> asyncpg.Pool:
    """The store's own asyncpg pool: floors run on the very connections the store uses."""
    pool: asyncpg.Pool = store._db._pool  # type: ignore[attr-defined]
    return pool


def _remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


async def open_sqlite(settings: Settings, name: str) -> Store:
    """A SQLite store in a fresh file under the work directory."""
    path = settings.workdir / f"{name}.db"
    _remove_db(path)  # a few unlinks of a temporary directory: not worth a thread
    store = store_from_url(f"sqlite:///{path}")
    await store.open()
    return store


BARE_INSERT = "INSERT INTO run_log (run_id, seq, record) VALUES ($1, $2, $3)"
BARE_INSERT_MANY = (
    "INSERT INTO run_log (run_id, seq, record) "
    "SELECT $1, e.seq, e.record FROM unnest($2::bigint[], $3::bytea[]) AS e(seq, record)"
)


async def bare_insert(pool: asyncpg.Pool, run_id: str, seq: int, record: bytes) -> float:
    """One single-row INSERT through the pool (acquire included, as for the store); seconds."""
    t0 = time.perf_counter()
    async with pool.acquire() as conn:
        await conn.execute(BARE_INSERT, run_id, seq, record)
    return time.perf_counter() - t0


async def bare_insert_many(
    pool: asyncpg.Pool, run_id: str, first_seq: int, records: Sequence[bytes]
) -> float:
    """One multi-row INSERT of `records` at consecutive seqs; seconds."""
    seqs = list(range(first_seq, first_seq + len(records)))
    t0 = time.perf_counter()
    async with pool.acquire() as conn:
        await conn.execute(BARE_INSERT_MANY, run_id, seqs, list(records))
    return time.perf_counter() - t0


# The full collection before each timed call in `interleaved`; the bench's smoke test makes
# it a young one (a full walk of a test runner's heap took ~0.1-0.45 s a call: 59 s of the
# suite for the fork family alone).
collect = gc.collect


async def interleaved(
    reps: int, fns: dict[str, Callable[[], Awaitable[object]]]
) -> dict[str, list[float]]:
    """p50 samples of each call, taken in turns (one of each per round): on a noisy
    machine a burst of load then hits every call alike instead of one of them."""
    out: dict[str, list[float]] = {name: [] for name in fns}
    for i in range(reps + 1):  # the first round warms up: statement caches, page cache
        for name, fn in fns.items():
            # Each call starts with the collector's counts at zero: a full collection of
            # what the calls before left (a large graph each) otherwise falls into whichever
            # call's turn it is, the same one round after round.
            collect()
            t0 = time.perf_counter()
            await fn()
            if i:
                out[name].append(time.perf_counter() - t0)
    return out


def rss_bytes() -> int:
    """This process's resident set size, from /proc."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")
