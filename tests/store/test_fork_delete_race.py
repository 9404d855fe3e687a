"""Invariant 9 (copy-on-delete) under concurrency: a fork created while its source is being
deleted either references only rows the delete copies out first, or is refused; it is
never left referencing rows that are gone.

The store-level interleavings run on every backend (SQLite and the memory store run one
writer at a time, so there the checks only need to be atomic); on PostgreSQL the fork and
the delete batch run on two connections and lock the source's `runs` row against each
other, shown by one side waiting on the other's lock (`pg_locks`), then in a loop of real
races."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from tests.agents import uid
from tests.test_fork_refs import chain
from tether import BadFork, Runtime, UnknownRun
from tether.model.records import decode_log
from tether.ops.retention import delete_run, remove_runs
from tether.store import Store
from tether.store.base import RunInfo, Status
from tether.store.forks import NewRun, Origin, Segment
from tether.store.postgres import PostgresStore
from tether.store.postgres.forks import _insert

BATCH = 7


async def finished_source(runtime: Runtime, n: int = 30) -> tuple[str, list[bytes]]:
    source = await runtime.start(chain, {"i": 0, "n": n}, run_id=uid("src"))
    assert source.status == Status.SUCCEEDED
    return source.run_id, await runtime.store.log.read_all(source.run_id)


def fork_of(source: str, rows: Sequence[bytes], at: int) -> NewRun:
    """A fork of `source` at `at` as `Runtime.fork` writes it (seq 0, one reference)."""
    info = RunInfo(uid("fork"), chain.name, Status.QUEUED)
    return NewRun(info, rows[0], Origin(source, at), [Segment(1, at, source)])


async def assert_reads_as_prefix(
    store: Store, fork_id: str, rows: Sequence[bytes], at: int
) -> None:
    got = await store.log.read_all(fork_id)  # seqs 0..at, in order
    assert len(got) == at + 1
    assert got[1:] == list(rows[1 : at + 1])
    decode_log(fork_id, got)


async def test_invariant_9_a_fork_made_after_the_copy_stops_the_next_delete_batch(
    store: Store,
) -> None:
    runtime = Runtime(store)
    source, rows = await finished_source(runtime)
    assert await store.forks.detach([source], limit=BATCH) == 0  # nothing referenced yet
    fork_id = await runtime.fork(source, at_seq=20)  # ...then a fork references rows
    assert await store.retention.delete_log([source], limit=BATCH) is None  # nothing deleted
    assert (await store.retention.log_size([source])).rows == len(rows)
    await remove_runs(store, [source], batch_rows=BATCH)
    assert await store.runs.get(source) is None
    await assert_reads_as_prefix(store, fork_id, rows, 20)


async def test_invariant_9_a_fork_of_rows_already_deleted_is_refused(store: Store) -> None:
    runtime = Runtime(store)
    source, rows = await finished_source(runtime)
    late = fork_of(source, rows, 28)  # read before the delete began
    assert (await store.retention.delete_log([source], limit=BATCH)) is not None  # its last 7 seqs
    try:
        await store.forks.create_runs([late])
    except BadFork as exc:
        assert str(exc) == f"run {source} is being deleted; cannot fork it"
    else:
        raise AssertionError("a fork referencing deleted rows was created")
    assert await store.runs.get(late.info.run_id) is None
    # Rows still there may be forked (and are copied out before they go).
    early = fork_of(source, rows, 20)
    await store.forks.create_runs([early])
    await remove_runs(store, [source], batch_rows=BATCH)
    await assert_reads_as_prefix(store, early.info.run_id, rows, 20)
    # Once the run is gone: UnknownRun, from the store and from Runtime.fork.
    gone = fork_of(source, rows, 5)
    try:
        await store.forks.create_runs([gone])
    except UnknownRun as exc:
        assert exc.run_id == source
    else:
        raise AssertionError("a fork of a deleted run was created")
    try:
        await runtime.fork(source, at_seq=5)
    except UnknownRun:
        pass
    else:
        raise AssertionError("Runtime.fork of a deleted run succeeded")
    assert await store.runs.get(gone.info.run_id) is None


async def waits_for_lock(pg_database: str, task: asyncio.Task[Any]) -> bool:
    """Until some backend of this database waits for a lock (True) or `task` ended without
    (False); bounded by a generous timeout, never a threshold."""

    async def poll(probe: asyncpg.Connection) -> bool:
        while not task.done():
            if await probe.fetchval(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ):
                return True
            await asyncio.sleep(0.01)
        return False

    probe = await asyncpg.connect(pg_database)
    try:
        return await asyncio.wait_for(poll(probe), 60)
    finally:
        await probe.close()


@contextlib.asynccontextmanager
async def uncommitted(store: PostgresStore) -> AsyncIterator[PoolConnectionProxy]:
    """A connection in a transaction, committed when the block ends."""
    async with store._db.connection() as conn, conn.transaction():
        yield conn


async def test_invariant_9_on_postgres_a_delete_batch_waits_for_a_fork_being_created(
    pg_store: PostgresStore, pg_database: str
) -> None:
    runtime = Runtime(pg_store)
    source, rows = await finished_source(runtime)
    fork = fork_of(source, rows, 25)
    async with uncommitted(pg_store) as conn:
        await _insert(conn, fork)  # written, not committed: the source's row is locked
        delete = asyncio.create_task(delete_run(pg_store, source, batch_rows=BATCH))
        waited = await waits_for_lock(pg_database, delete)
    assert waited, "the delete batch did not wait for the fork being created"
    await asyncio.wait_for(delete, 60)
    assert await pg_store.runs.get(source) is None
    await assert_reads_as_prefix(pg_store, fork.info.run_id, rows, 25)


async def test_invariant_9_on_postgres_a_fork_waits_for_a_delete_batch_then_is_refused(
    pg_store: PostgresStore, pg_database: str
) -> None:
    runtime = Runtime(pg_store)
    source, rows = await finished_source(runtime)
    fork = fork_of(source, rows, 28)
    async with uncommitted(pg_store) as conn:
        # What a delete batch does (PostgresRetention.delete_log), not committed yet.
        await conn.fetch("SELECT 1 FROM runs WHERE run_id = $1 FOR UPDATE", source)
        last_kept = len(rows) - 1 - BATCH
        await conn.execute("DELETE FROM run_log WHERE run_id = $1 AND seq > $2", source, last_kept)
        create = asyncio.create_task(pg_store.forks.create_runs([fork]))
        waited = await waits_for_lock(pg_database, create)
    assert waited, "the fork did not wait for the delete batch"
    try:
        await asyncio.wait_for(create, 60)
    except BadFork as exc:
        assert "being deleted" in str(exc)
    else:
        raise AssertionError("a fork referencing deleted rows was created")
    assert await pg_store.runs.get(fork.info.run_id) is None


async def test_invariant_9_forks_racing_deletes_are_readable_or_refused(
    durable_store: Store,
) -> None:
    """Many real races (two PostgreSQL connections; SQLite's one writer at a time): a fork
    at a random seq started together with the delete of its source, in random order."""
    store = durable_store
    runtime = Runtime(store)
    rng = random.Random(13)
    outcomes = {"forked": 0, "refused": 0}

    async def one() -> None:
        source, rows = await finished_source(runtime, n=rng.randrange(8, 30))
        at = rng.randrange(1, len(rows) - 1)
        fork = asyncio.ensure_future(runtime.fork(source, at_seq=at))
        delete = asyncio.ensure_future(delete_run(store, source, batch_rows=rng.randrange(1, 6)))
        done = await asyncio.gather(fork, delete, return_exceptions=True)
        assert not isinstance(done[1], BaseException), done[1]
        assert await store.runs.get(source) is None
        if isinstance(done[0], BaseException):
            assert isinstance(done[0], UnknownRun | BadFork), done[0]
            outcomes["refused"] += 1
        else:
            await assert_reads_as_prefix(store, str(done[0]), rows, at)
            assert await store.forks.segments(str(done[0])) == []  # copied out
            outcomes["forked"] += 1

    async def all_of_them() -> None:
        for _ in range(40):
            await one()

    await asyncio.wait_for(all_of_them(), 300)
    assert sum(outcomes.values()) == 40
