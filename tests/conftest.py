"""Fixtures: one opened store per backend, throwaway PostgreSQL databases, a moto S3 server."""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import boto3
import pytest
from hypothesis import settings

from tests.s3server import S3_KEY, S3_REGION, free_port
from tether.store import Store, store_from_url
from tether.store.postgres import migrate

# Property tests: `ci` (the default) keeps the suite's time; `local` explores far more.
# Choose with `pytest --hypothesis-profile=local` (or HYPOTHESIS_PROFILE=local).
settings.register_profile("ci", max_examples=60)
settings.register_profile("local", max_examples=500)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Workers and servers the tests start are handed demo runs: they serve the demo's scripted
# model only when asked (`--demo` / TETHER_DEMO=1); tests/test_cli_control.py checks that a
# worker started without it serves none.
os.environ["TETHER_DEMO"] = "1"

PG_ADMIN_URL = os.environ.get(
    "TETHER_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
_names = itertools.count()


def pg_url(dbname: str) -> str:
    """The admin URL pointed at another database on the same server."""
    return urlunsplit(urlsplit(PG_ADMIN_URL)._replace(path=f"/{dbname}"))


def fresh_db_name(kind: str) -> str:
    # The pid keeps concurrent test sessions on one server out of each other's way.
    return f"tether_{kind}_{os.getpid()}_{next(_names)}"


async def pg_admin(*statements: str) -> None:
    """Run statements on the admin database; fail (never skip) if the server is down."""
    try:
        conn = await asyncpg.connect(PG_ADMIN_URL, timeout=10)
    except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
        pytest.fail(
            f"PostgreSQL is not reachable at {urlsplit(PG_ADMIN_URL).netloc} ({exc}); the "
            "store tests need it: start it (`pg_ctlcluster --skip-systemctl-redirect 15 main "
            "start`) or point TETHER_TEST_POSTGRES_URL at a server",
            pytrace=False,
        )
    try:
        for sql in statements:
            await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    """A database with every migration applied, cloned by each test module."""
    name = fresh_db_name("template")
    asyncio.run(pg_admin(f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name}"))
    asyncio.run(migrate(pg_url(name)))
    yield name
    asyncio.run(pg_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture(scope="module")
def pg_database(pg_template: str) -> Iterator[str]:
    """URL of a fresh migrated database for one test module (a template copy is fast)."""
    name = fresh_db_name("test")
    asyncio.run(pg_admin(f"CREATE DATABASE {name} TEMPLATE {pg_template}"))
    yield pg_url(name)
    asyncio.run(pg_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture
def fresh_pg_database(pg_template: str) -> Iterator[str]:
    """URL of a fresh migrated database for one test (for tests that run real processes)."""
    name = fresh_db_name("fresh")
    asyncio.run(pg_admin(f"CREATE DATABASE {name} TEMPLATE {pg_template}"))
    yield pg_url(name)
    asyncio.run(pg_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture
def empty_pg_database() -> Iterator[str]:
    """URL of an empty database (no migrations), for tests of migrating itself."""
    name = fresh_db_name("empty")
    asyncio.run(pg_admin(f"CREATE DATABASE {name}"))
    yield pg_url(name)
    asyncio.run(pg_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


def _url_of(backend: str, request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    if backend == "sqlite":
        return f"sqlite:///{tmp_path}/tether.db"
    if backend == "postgres":
        url: str = request.getfixturevalue("pg_database")
        return url
    return "memory:"


@pytest.fixture(params=["sqlite", "postgres", "memory"])
def store_url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    """The URL of an empty store of each backend."""
    return _url_of(request.param, request, tmp_path)


@pytest.fixture(params=["sqlite", "postgres"])
def durable_store_url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    """The URL of an empty store that outlives a process (for tests that kill one)."""
    return _url_of(request.param, request, tmp_path)


async def _opened(url: str) -> AsyncIterator[Store]:
    if url.startswith("postgresql://"):
        # Tests of a module share its database; each starts from empty tables.
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("TRUNCATE run_log, runs, model_rates, schedules, run_limits")
        finally:
            await conn.close()
    s = store_from_url(url)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    """An opened store of each backend, empty."""
    async for s in _opened(store_url):
        yield s


@pytest.fixture
async def durable_store(durable_store_url: str) -> AsyncIterator[Store]:
    """An opened SQLite or PostgreSQL store, empty."""
    async for s in _opened(durable_store_url):
        yield s


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[Store]:
    store = store_from_url(f"sqlite:///{tmp_path / 'tether.db'}")
    async with store:
        yield store


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """Endpoint url of a moto S3 server run as a subprocess on 127.0.0.1 (one per session)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    # Ready when it answers a request, not after a fixed sleep.
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto server on {endpoint} did not start") from None
            time.sleep(0.05)
    try:
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def s3_client(s3_endpoint: str) -> Any:
    """A plain boto3 client on the moto server, to inspect and tamper with objects."""
    return boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        aws_access_key_id=S3_KEY,
        aws_secret_access_key=S3_KEY,
        region_name=S3_REGION,
    )


@pytest.fixture
def s3_bucket(s3_client: Any) -> str:
    """A fresh, empty bucket."""
    name = f"b-{uuid.uuid4().hex[:16]}"
    s3_client.create_bucket(Bucket=name)
    return name
