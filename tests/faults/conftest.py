"""Fixtures for the fault suite: a private PostgreSQL cluster, a fresh database per test.

Every test here may stop, restart or partition PostgreSQL, so none of them touches the
machine's shared server: the session gets a cluster of its own (tests/pgcluster.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import asyncpg
import pytest

from tests.conftest import fresh_db_name
from tests.faults.harness import prepare
from tests.pgcluster import PgCluster, open_cluster
from tether.store.postgres import migrate


async def admin(cluster: PgCluster, *statements: str) -> None:
    conn = await asyncpg.connect(cluster.url, timeout=10)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


def new_fault_db(cluster: PgCluster, template: str) -> str:
    name = fresh_db_name("faults")
    asyncio.run(admin(cluster, f"CREATE DATABASE {name} TEMPLATE {template}"))
    url = cluster.url_of(name)
    prepare(url)
    return url


def drop(cluster: PgCluster, url: str) -> None:
    name = url.rsplit("/", 1)[1]
    asyncio.run(admin(cluster, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture(scope="session")
def fault_cluster() -> Iterator[PgCluster]:
    """The fault suite's own PostgreSQL, stopped and removed at the end of the session."""
    with open_cluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def fault_template(fault_cluster: PgCluster) -> str:
    """A migrated database on the private cluster, cloned by each test."""
    name = fresh_db_name("template")
    asyncio.run(admin(fault_cluster, f"CREATE DATABASE {name}"))
    asyncio.run(migrate(fault_cluster.url_of(name)))
    return name


@pytest.fixture
def fault_db(fault_cluster: PgCluster, fault_template: str) -> Iterator[str]:
    url = new_fault_db(fault_cluster, fault_template)
    yield url
    drop(fault_cluster, url)
