"""Append lanes: the log's appends run on connections of its own, outside the pool."""

from __future__ import annotations

import asyncio

import pytest

from tether.foundation.errors import StoreUnavailable
from tether.store import RunInfo, Status
from tether.store.postgres import PostgresStore


def _backend_pids(store: PostgresStore) -> set[int]:
    """The server pids of the lanes open and idle now."""
    return {conn.get_server_pid() for conn in store._log._lanes._idle}


async def test_appends_reuse_one_lane_and_leave_the_pool_alone(pg_store: PostgresStore) -> None:
    await pg_store.runs.create(RunInfo("lane-1", "agent", Status.QUEUED), b"started")
    for seq in range(1, 6):
        await pg_store.log.append("lane-1", [(seq, b"r%d" % seq)])
    lanes = pg_store._log._lanes
    assert lanes.opened == 1  # one after another: the same lane each time
    assert len(_backend_pids(pg_store)) == 1
    assert [s for s, _ in await pg_store.log.read("lane-1")] == [0, 1, 2, 3, 4, 5]


async def test_concurrent_appends_open_at_most_size_lanes(pg_store: PostgresStore) -> None:
    ids = [f"many-{i}" for i in range(30)]
    for run_id in ids:
        await pg_store.runs.create(RunInfo(run_id, "agent", Status.QUEUED), b"started")
    await asyncio.gather(*(pg_store.log.append(r, [(1, r.encode())]) for r in ids))
    lanes = pg_store._log._lanes
    assert 1 <= lanes.opened <= lanes.size == 2
    for run_id in ids:
        assert await pg_store.log.read(run_id) == [(0, b"started"), (1, run_id.encode())]


async def test_a_lost_lane_is_unavailable_once_then_replaced(pg_store: PostgresStore) -> None:
    await pg_store.runs.create(RunInfo("lost", "agent", Status.QUEUED), b"started")
    await pg_store.log.append("lost", [(1, b"one")])
    (pid,) = _backend_pids(pg_store)
    await pg_store._db.execute("SELECT pg_terminate_backend($1)", pid)
    with pytest.raises(StoreUnavailable):  # the writer retries this (appends are idempotent)
        await pg_store.log.append("lost", [(2, b"two")])
    assert pg_store._log._lanes.opened == 0  # the dead lane was forgotten
    await pg_store.log.append("lost", [(2, b"two")])
    assert _backend_pids(pg_store) not in ({pid}, set())
    assert await pg_store.log.read("lost") == [(0, b"started"), (1, b"one"), (2, b"two")]


async def test_close_closes_the_lanes(pg_database: str) -> None:
    store = PostgresStore(pg_database)
    await store.open()
    await store.runs.create(RunInfo("closed", "agent", Status.QUEUED), b"started")
    await store.log.append("closed", [(1, b"one")])
    (pid,) = _backend_pids(store)
    await store.close()
    assert store._log._lanes.opened == 0
    probe = PostgresStore(pg_database)
    await probe.open()
    try:
        rows = await probe._db.fetch("SELECT 1 FROM pg_stat_activity WHERE pid = $1", pid)
        for _ in range(50):  # the server notices the closed socket a moment later
            if not rows:
                break
            await asyncio.sleep(0.05)
            rows = await probe._db.fetch("SELECT 1 FROM pg_stat_activity WHERE pid = $1", pid)
        assert rows == []
    finally:
        await probe.close()
