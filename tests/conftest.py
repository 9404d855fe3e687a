"""Shared fixtures: real stores (SQLite file; PostgreSQL joins in tests/store)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tether.store import Store, store_from_url


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[Store]:
    store = store_from_url(f"sqlite:///{tmp_path / 'tether.db'}")
    async with store:
        yield store


@pytest.fixture(params=["sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    store = store_from_url(f"sqlite:///{tmp_path / 'tether.db'}")
    async with store:
        yield store


@pytest.fixture(params=["sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL for tests that open their own stores (e.g. one per hypothesis example)."""
    return f"sqlite:///{tmp_path / 'tether.db'}"
