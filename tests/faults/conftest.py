"""Fixtures for the fault suite: a fresh database per test with the effects and audit tables."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.conftest import fresh_db_name, pg_admin, pg_url
from tests.faults.harness import prepare


def new_fault_db(template: str) -> str:
    name = fresh_db_name("faults")
    asyncio.run(pg_admin(f"CREATE DATABASE {name} TEMPLATE {template}"))
    url = pg_url(name)
    prepare(url)
    return url


def drop(url: str) -> None:
    asyncio.run(pg_admin(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)"))


@pytest.fixture
def fault_db(pg_template: str) -> Iterator[str]:
    url = new_fault_db(pg_template)
    yield url
    drop(url)
