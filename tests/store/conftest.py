"""Fixtures of the store tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tether.store.postgres import PostgresStore


@pytest.fixture
async def pg_store(pg_database: str) -> AsyncIterator[PostgresStore]:
    """The PostgreSQL store on this module's database, opened (a module may override it)."""
    store = PostgresStore(pg_database)
    await store.open()
    try:
        yield store
    finally:
        await store.close()
