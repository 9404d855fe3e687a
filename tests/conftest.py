"""Fixtures: one opened store per backend, and throwaway PostgreSQL databases."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from tether.store import Store, store_from_url
from tether.store.postgres import migrate

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
def empty_pg_database() -> Iterator[str]:
    """URL of an empty database (no migrations), for tests of migrating itself."""
    name = fresh_db_name("empty")
    asyncio.run(pg_admin(f"CREATE DATABASE {name}"))
    yield pg_url(name)
    asyncio.run(pg_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture(params=["sqlite", "postgres", "memory"])
def store_url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> str:
    """The URL of an empty store of each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/tether.db"
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_database")
        return url
    return "memory:"


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[Store]:
    """An opened store of each backend, empty."""
    if store_url.startswith("postgresql://"):
        # Tests of a module share its database; each starts from empty tables.
        conn = await asyncpg.connect(store_url)
        try:
            await conn.execute("TRUNCATE run_log, runs")
        finally:
            await conn.close()
    s = store_from_url(store_url)
    await s.open()
    try:
        yield s
    finally:
        await s.close()
