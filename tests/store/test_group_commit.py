"""Group commit on PostgreSQL: concurrent runs' appends (and finishes) share one statement,
judged per run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Iterable
from typing import TypeVar

import asyncpg
import pytest

from tether.foundation.errors import ConflictingRecord, StaleEpoch
from tether.store import RunInfo, Status
from tether.store.postgres import PostgresStore

T = TypeVar("T")


@pytest.fixture
async def pg_store(pg_database: str) -> AsyncIterator[PostgresStore]:
    store = PostgresStore(pg_database)
    await store.open()
    await store._db.execute("TRUNCATE run_log, runs")  # claims pick the oldest runs
    # One append in flight at a time: every append that starts meanwhile queues, so the
    # queued ones leave together as one shared statement.
    store._log._group.statements = 1
    store._leases._finishes.statements = 1  # finishes likewise
    try:
        yield store
    finally:
        await store.close()


async def _runs(
    store: PostgresStore, prefix: str, n: int, status: Status = Status.QUEUED
) -> list[str]:
    ids = [f"{prefix}-{i}" for i in range(n)]
    for run_id in ids:
        await store.runs.create(RunInfo(run_id, "agent", status), b"started")
    return ids


async def _results(calls: Iterable[Awaitable[T]]) -> list[BaseException | T]:
    return list(await asyncio.gather(*calls, return_exceptions=True))


async def test_concurrent_appends_of_many_runs_share_statements(pg_store: PostgresStore) -> None:
    ids = await _runs(pg_store, "g", 20)
    before = pg_store._log._group.statistics()
    results = await _results(
        [pg_store.log.append(r, [(1, f"{r} one".encode()), (2, b"two")]) for r in ids]
    )
    assert results == [None] * 20
    after = pg_store._log._group.statistics()
    # The first went alone; the 19 that queued behind it left in one statement.
    assert after["group_statements"] - before["group_statements"] == 1
    assert after["grouped_appends"] - before["grouped_appends"] == 19
    for r in ids:
        assert await pg_store.log.read(r) == [
            (0, b"started"),
            (1, f"{r} one".encode()),
            (2, b"two"),
        ]
    # Retried in a group, the same records are a no-op for every run.
    assert await _results([pg_store.log.append(r, [(2, b"two")]) for r in ids]) == [None] * 20


async def test_records_of_any_bytes_and_length_land_intact_in_a_shared_statement(
    pg_store: PostgresStore,
) -> None:
    ids = await _runs(pg_store, "b", 8)
    claims = {c.run_id: c.epoch for c in await pg_store.leases.claim("w", limit=4, ttl=30)}
    # Empty, NUL and high bytes, lengths from 0 to 70,000; one to three records a run;
    # fenced and unfenced runs (their rows are sent in another order).
    records = {
        r: [bytes([i, 0, 255]) * (i * 7_000), b"", bytes(range(256))][: 1 + i % 3]
        for i, r in enumerate(ids)
    }
    before = pg_store._log._group.statistics()
    results = await _results(
        [
            pg_store.log.append(r, list(enumerate(rs, 1)), epoch=claims.get(r))
            for r, rs in records.items()
        ]
    )
    assert results == [None] * 8
    assert pg_store._log._group.statistics()["group_statements"] > before["group_statements"]
    for r, rs in records.items():
        assert await pg_store.log.read(r) == [(0, b"started"), *enumerate(rs, 1)]


async def test_retries_and_new_records_in_one_shared_statement_all_land(
    pg_store: PostgresStore,
) -> None:
    ids = await _runs(pg_store, "rt", 10)
    claims = {c.run_id: c.epoch for c in await pg_store.leases.claim("w", limit=10, ttl=30)}
    retried = ids[::2]  # their first attempt landed (as before a lost connection)
    for r in retried:
        await pg_store.log.append(r, [(1, b"one")], epoch=claims[r])
    before = pg_store._log._group.statistics()
    results = await _results(
        [pg_store.log.append(r, [(1, b"one"), (2, b"two")], epoch=claims[r]) for r in ids]
    )
    assert results == [None] * 10
    for r in ids:
        assert await pg_store.log.read(r) == [(0, b"started"), (1, b"one"), (2, b"two")]
    after = pg_store._log._group.statistics()
    # The shared statement met a taken seq and landed nothing: each of its runs went alone
    # (the retries there a no-op for their landed records).
    assert after["group_statements"] - before["group_statements"] == 1
    assert after["grouped_appends"] - before["grouped_appends"] == 9
    assert after["undecided_appends"] - before["undecided_appends"] == 9


async def test_a_fenced_off_run_in_a_shared_statement_fails_alone(
    pg_store: PostgresStore,
) -> None:
    ids = await _runs(pg_store, "f", 6)
    claims = {c.run_id: c.epoch for c in await pg_store.leases.claim("w", limit=6, ttl=30)}
    stale = ids[3]
    await pg_store.leases.release(stale, claims[stale], Status.PAUSED, "drain")
    (taken,) = await pg_store.leases.claim("other", limit=1, ttl=30)
    assert taken.run_id == stale and taken.epoch > claims[stale]
    before = pg_store._log._group.statistics()
    results = await _results(
        [pg_store.log.append(r, [(1, r.encode())], epoch=claims[r]) for r in ids]
    )
    assert isinstance(results[3], StaleEpoch)
    assert [r for i, r in enumerate(results) if i != 3] == [None] * 5
    for i, r in enumerate(ids):
        expected = [(0, b"started")] if i == 3 else [(0, b"started"), (1, r.encode())]
        assert await pg_store.log.read(r) == expected
    # The others landed in the shared statement; only the fenced-off run went alone.
    after = pg_store._log._group.statistics()
    assert after["group_statements"] - before["group_statements"] == 1
    assert after["grouped_appends"] - before["grouped_appends"] == 5
    assert after["undecided_appends"] - before["undecided_appends"] == 1


async def test_a_mixed_batch_lands_but_for_its_fenced_off_run(pg_store: PostgresStore) -> None:
    fenced = await _runs(pg_store, "mf", 4)
    claims = {c.run_id: c.epoch for c in await pg_store.leases.claim("w", limit=4, ttl=30)}
    stale = fenced[1]
    await pg_store.leases.release(stale, claims[stale], Status.PAUSED, "drain")
    await pg_store.leases.claim("other", limit=1, ttl=30)
    free = await _runs(pg_store, "mu", 4)  # appended without an epoch
    # The first append goes alone (nothing in flight); the rest queue and leave together,
    # fenced and unfenced runs alike, with several records each.
    order = [r for pair in zip(free, fenced, strict=True) for r in pair]
    before = pg_store._log._group.statistics()
    results = dict(
        zip(
            order,
            await _results(
                [
                    pg_store.log.append(r, [(1, b"a"), (2, r.encode())], epoch=claims.get(r))
                    for r in order
                ]
            ),
            strict=True,
        )
    )
    assert isinstance(results.pop(stale), StaleEpoch)
    assert list(results.values()) == [None] * 7
    for r in results:
        assert await pg_store.log.read(r) == [(0, b"started"), (1, b"a"), (2, r.encode())]
    assert await pg_store.log.read(stale) == [(0, b"started")]
    after = pg_store._log._group.statistics()
    assert after["group_statements"] - before["group_statements"] == 1
    assert after["grouped_appends"] - before["grouped_appends"] == 7
    assert after["undecided_appends"] - before["undecided_appends"] == 1


async def test_a_conflict_in_a_shared_statement_is_reported_to_its_run_only(
    pg_store: PostgresStore,
) -> None:
    ids = await _runs(pg_store, "c", 6)
    await pg_store.log.append(ids[4], [(1, b"already here")])
    results = await _results([pg_store.log.append(r, [(1, b"new"), (2, b"more")]) for r in ids])
    assert isinstance(results[4], ConflictingRecord)
    assert [r for i, r in enumerate(results) if i != 4] == [None] * 5
    # All or none per run: the conflicting run's seq 2 did not land either.
    assert await pg_store.log.read(ids[4]) == [(0, b"started"), (1, b"already here")]
    for i, r in enumerate(ids):
        if i != 4:
            assert await pg_store.log.read(r) == [(0, b"started"), (1, b"new"), (2, b"more")]


async def test_a_lone_append_never_waits_for_a_group(pg_store: PostgresStore) -> None:
    (run_id,) = await _runs(pg_store, "lone", 1)
    before = pg_store._log._group.statistics()
    for seq in range(1, 6):
        await pg_store.log.append(run_id, [(seq, b"x")])
    assert pg_store._log._group.statistics() == before
    assert pg_store._log._group.inflight == 0


async def test_a_waiter_cancelled_in_the_queue_is_left_out(pg_store: PostgresStore) -> None:
    ids = await _runs(pg_store, "x", 4)
    tasks = [asyncio.ensure_future(pg_store.log.append(r, [(1, b"r")])) for r in ids]
    await asyncio.sleep(0)  # all four started: the first in flight, three queued
    tasks[2].cancel()
    results = await _results(tasks)
    assert isinstance(results[2], asyncio.CancelledError)
    assert results[:2] + results[3:] == [None] * 3
    assert await pg_store.log.read(ids[2]) == [(0, b"started")]
    assert pg_store._log._group.inflight == 0


@pytest.mark.parametrize("finish", [False, True], ids=["append", "finish"])
async def test_a_run_whose_row_is_locked_waits_alone_and_the_others_land(
    pg_store: PostgresStore, pg_database: str, finish: bool
) -> None:
    ids = await _runs(pg_store, "l", 5)
    claims = {c.run_id: c.epoch for c in await pg_store.leases.claim("w", limit=5, ttl=30)}
    locked = ids[2]

    async def call(r: str) -> bool | None:
        if finish:
            return await pg_store.leases.release(r, claims[r], Status.SUCCEEDED, final=(1, b"r"))
        await pg_store.log.append(r, [(1, b"r")], epoch=claims[r])
        return None

    blocker = await asyncpg.connect(pg_database)
    try:
        tx = blocker.transaction()
        await tx.start()
        # A lease renewal of that run in progress: its row is locked for update.
        await blocker.execute("SELECT 1 FROM runs WHERE run_id = $1 FOR NO KEY UPDATE", locked)
        tasks = {r: asyncio.ensure_future(call(r)) for r in ids}
        others = [t for r, t in tasks.items() if r != locked]
        assert await _results(others) == [finish or None] * 4
        assert not tasks[locked].done()  # waiting for the row, alone
        await tx.commit()
        assert await tasks[locked] == (finish or None)
    finally:
        await blocker.close()
    for r in ids:
        assert await pg_store.log.read(r) == [(0, b"started"), (1, b"r")]
        if finish:
            assert await _status(pg_store, r) == (Status.SUCCEEDED, None, None)


async def test_group_commit_0_in_the_url_sends_every_append_alone(pg_database: str) -> None:
    async with PostgresStore(f"{pg_database}?group_commit=0") as store:
        assert store._log._group.statements == 0
        ids = await _runs(store, "off", 10)
        assert await _results([store.log.append(r, [(1, b"a")]) for r in ids]) == [None] * 10
        assert store._log._group.statistics()["group_statements"] == 0
        assert store._log._group.inflight == 0
        for r in ids:
            assert await store.log.read(r) == [(0, b"started"), (1, b"a")]


# -- finishes ---------------------------------------------------------------


def _stats(store: PostgresStore) -> dict[str, int]:
    return store._leases._finishes.statistics()


async def _status(store: PostgresStore, run_id: str) -> tuple[Status, str | None, str | None]:
    info = await store.runs.get(run_id)
    assert info is not None
    return info.status, info.reason, info.owner


async def test_concurrent_finishes_share_a_statement(pg_store: PostgresStore) -> None:
    ids = await _runs(pg_store, "s", 8, Status.RUNNING)
    before = _stats(pg_store)
    results = await _results(
        [pg_store.leases.release(r, None, Status.SUCCEEDED, final=(1, r.encode())) for r in ids]
    )
    assert results == [True] * 8
    for r in ids:
        assert await pg_store.log.read(r) == [(0, b"started"), (1, r.encode())]
        assert await _status(pg_store, r) == (Status.SUCCEEDED, None, None)
    after = _stats(pg_store)
    # The first went alone (nothing in flight); the other seven left together.
    assert after["group_statements"] - before["group_statements"] == 1
    assert after["grouped_finishes"] - before["grouped_finishes"] == 7
    assert after["undecided_finishes"] == before["undecided_finishes"]


async def test_a_fenced_off_finish_in_a_shared_statement_fails_alone(
    pg_store: PostgresStore,
) -> None:
    ids = await _runs(pg_store, "f", 6, Status.QUEUED)
    claims = {c.run_id: c.epoch for c in await pg_store.leases.claim("w", limit=6, ttl=30)}
    stale = ids[3]
    await pg_store.leases.release(stale, claims[stale], Status.PAUSED, "drain")
    (taken,) = await pg_store.leases.claim("other", limit=1, ttl=30)
    assert taken.run_id == stale
    before = _stats(pg_store)
    results = await _results(
        [
            pg_store.leases.release(r, claims[r], Status.FAILED, "boom", final=(1, b"end"))
            for r in ids
        ]
    )
    assert isinstance(results[3], StaleEpoch)
    assert [r for i, r in enumerate(results) if i != 3] == [True] * 5
    # The fenced-off run: no record, its row still the new owner's.
    assert await pg_store.log.read(stale) == [(0, b"started")]
    assert await _status(pg_store, stale) == (Status.RUNNING, None, "other")
    for r in ids:
        if r != stale:
            assert await pg_store.log.read(r) == [(0, b"started"), (1, b"end")]
            assert await _status(pg_store, r) == (Status.FAILED, "boom", None)
    after = _stats(pg_store)
    assert after["group_statements"] - before["group_statements"] == 1
    assert after["undecided_finishes"] - before["undecided_finishes"] == 1


async def test_a_conflict_and_a_retry_in_a_shared_statement_are_judged_per_run(
    pg_store: PostgresStore,
) -> None:
    ids = await _runs(pg_store, "c", 6, Status.RUNNING)
    await pg_store.log.append(ids[2], [(1, b"a node here")])  # a different record at seq 1
    await pg_store.log.append(ids[4], [(1, b"end")])  # a retry: the same record landed
    results = await _results(
        [pg_store.leases.release(r, None, Status.SUCCEEDED, final=(1, b"end")) for r in ids]
    )
    assert isinstance(results[2], ConflictingRecord)
    assert [r for i, r in enumerate(results) if i != 2] == [True] * 5
    assert await pg_store.log.read(ids[2]) == [(0, b"started"), (1, b"a node here")]
    assert await _status(pg_store, ids[2]) == (Status.RUNNING, None, None)
    for i, r in enumerate(ids):
        if i != 2:
            assert await pg_store.log.read(r) == [(0, b"started"), (1, b"end")]
            assert await _status(pg_store, r) == (Status.SUCCEEDED, None, None)


async def test_a_grouped_finish_that_parks_wakes_the_workers(
    pg_store: PostgresStore, pg_database: str
) -> None:
    ids = await _runs(pg_store, "w", 4, Status.RUNNING)
    listener = await asyncpg.connect(pg_database)
    heard: list[str] = []
    try:
        await listener.add_listener("tether_work", lambda *a: heard.append(a[3]))
        results = await _results(
            [
                pg_store.leases.release(
                    r, None, Status.WAITING, "event", final=(1, b"parked"), wake_at=5.0
                )
                for r in ids
            ]
        )
        assert results == [True] * 4
        for _ in range(100):
            if len(heard) >= 4:
                break
            await asyncio.sleep(0.02)
    finally:
        await listener.close()
    assert sorted(heard) == sorted(ids)
    for r in ids:
        assert await _status(pg_store, r) == (Status.WAITING, "event", None)
        assert await pg_store._db.fetch("SELECT wake_at FROM runs WHERE run_id = $1", r) == [(5.0,)]
    assert _stats(pg_store)["grouped_finishes"] == 3  # the first went alone
