"""PostgreSQL only: fencing under concurrency, migrations, lost connections, URLs."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from tests.s3server import free_port
from tether.foundation.errors import StaleEpoch, StoreUnavailable
from tether.store import RunInfo, Status, migrate_url
from tether.store.postgres import PostgresStore, migrate
from tether.store.queries import load_migrations, load_queries, load_schema

Q = load_queries("postgres")


@pytest.fixture
async def pg_store(pg_database: str) -> AsyncIterator[PostgresStore]:
    conn = await asyncpg.connect(pg_database)
    try:
        await conn.execute("TRUNCATE run_log, runs")
    finally:
        await conn.close()
    async with PostgresStore(pg_database, min_size=2, max_size=4) as store:
        yield store  # type: ignore[misc]


@pytest.fixture
async def conns(pg_database: str) -> AsyncIterator[list[asyncpg.Connection]]:
    """Three raw connections: two to play other replicas, one to watch pg_locks."""
    opened = [await asyncpg.connect(pg_database) for _ in range(3)]
    try:
        yield opened
    finally:
        for conn in opened:
            await conn.close()


async def wait_until_blocked_by(watcher: asyncpg.Connection, blocker_pid: int) -> None:
    """Return once some backend waits on a lock held by `blocker_pid` (a handshake)."""
    query = "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))"
    # The server's lock table is the only witness that the other statement is waiting,
    # so poll it (an Event cannot see inside the server); bounded at about 10 s.
    for _ in range(5000):
        if await watcher.fetchval(query, blocker_pid) > 0:
            return
        await asyncio.sleep(0.002)
    pytest.fail(f"no backend ever waited on a lock held by pid {blocker_pid}")


def run(run_id: str) -> RunInfo:
    return RunInfo(run_id=run_id, agent="agent", status=Status.RUNNING)


async def refused_once_a_claim_commits(
    conns: list[asyncpg.Connection], call: Callable[[], Awaitable[object]]
) -> None:
    """`call()` (a fenced statement at epoch 0 of run 'r') waits for a claim of the run's
    row that commits meanwhile; it must then find the new epoch: StaleEpoch."""
    claimer, watcher, _ = conns
    claim = claimer.transaction()
    await claim.start()
    await claimer.execute("UPDATE runs SET epoch = epoch + 1 WHERE run_id = 'r'")

    async def fenced() -> BaseException | None:
        try:
            await call()
        except StaleEpoch as exc:
            return exc
        return None

    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(fenced())
        # The statement is now waiting for the claimed row...
        await wait_until_blocked_by(watcher, claimer.get_server_pid())
        assert not task.done()
        # ...and the claim commits while it waits.
        await claim.commit()
    assert isinstance(task.result(), StaleEpoch)


async def test_a_claim_committed_during_a_fenced_append_makes_it_stale(
    pg_store: PostgresStore, conns: list[asyncpg.Connection]
) -> None:
    await pg_store.runs.create(run("r"), b"first")
    await refused_once_a_claim_commits(
        conns, lambda: pg_store.log.append("r", [(1, b"late")], epoch=0)
    )
    assert await pg_store.log.read("r") == [(0, b"first")]


async def test_a_claim_committed_during_a_resume_leaves_neither_record_nor_status(
    pg_store: PostgresStore, conns: list[asyncpg.Connection]
) -> None:
    """The resume's one statement (RunResumed + status RUNNING) waits for the claimed row,
    then finds the new epoch: it writes nothing at all."""
    await pg_store.runs.create(run("r"), b"first")
    await pg_store.runs.set_status("r", Status.PAUSED, epoch=0)
    await refused_once_a_claim_commits(
        conns,
        lambda: pg_store.runs.set_status("r", Status.RUNNING, epoch=0, record=(1, b"resumed")),
    )
    assert await pg_store.log.read("r") == [(0, b"first")]
    info = await pg_store.runs.get("r")
    assert info is not None and (info.status, info.epoch) == (Status.PAUSED, 1)


async def test_a_claim_waits_for_an_in_flight_fenced_append(
    pg_store: PostgresStore, conns: list[asyncpg.Connection]
) -> None:
    appender, claimer, watcher = conns
    await pg_store.runs.create(run("r"), b"first")
    # The store's own statement, held open in a transaction: an append in flight.
    pending = appender.transaction()
    await pending.start()
    assert await appender.execute(Q["append_fenced"], "r", [1], [b"a"], 0) == "INSERT 0 1"

    async with asyncio.TaskGroup() as tg:
        claim = tg.create_task(
            claimer.execute("UPDATE runs SET epoch = epoch + 1 WHERE run_id = 'r'")
        )
        # FOR SHARE holds the claim back (FOR KEY SHARE would let it through).
        await wait_until_blocked_by(watcher, appender.get_server_pid())
        assert not claim.done()
        await pending.commit()
    assert claim.result() == "UPDATE 1"
    assert await pg_store.log.read("r") == [(0, b"first"), (1, b"a")]
    with pytest.raises(StaleEpoch):
        await pg_store.log.append("r", [(2, b"b")], epoch=0)
    await pg_store.log.append("r", [(2, b"b")], epoch=1)


async def test_the_store_survives_its_connections_being_terminated(
    pg_store: PostgresStore, conns: list[asyncpg.Connection]
) -> None:
    admin = conns[0]
    await pg_store.runs.create(run("r"), b"first")
    await pg_store.log.append("r", [(1, b"one")])
    killed = await admin.fetchval(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE datname = current_database() AND application_name = ''"
        " AND pid <> ALL($1::int[])",
        [c.get_server_pid() for c in conns],
    )
    assert killed >= 2  # the pool's min_size connections
    unavailable = 0
    for seq in range(2, 8):
        entry = [(seq, f"record {seq}".encode())]
        # Each dead pooled connection fails one call at most, then the pool replaces it;
        # StoreUnavailable is retryable by contract since the append is idempotent.
        for _ in range(pg_store.pool_size[1]):
            try:
                await pg_store.log.append("r", entry)
                break
            except StoreUnavailable:
                unavailable += 1
        else:
            pytest.fail(f"the append of seq {seq} kept failing after the pool reconnected")
    assert unavailable <= killed
    expected = [(0, b"first"), (1, b"one")] + [(s, f"record {s}".encode()) for s in range(2, 8)]
    assert await pg_store.log.read("r") == expected


async def test_an_unreachable_server_is_store_unavailable() -> None:
    # Port 1 on loopback: nothing listens, so the connection is refused at once.
    store = PostgresStore("postgresql://postgres@127.0.0.1:1/nothing")
    with pytest.raises(StoreUnavailable, match=re.escape("127.0.0.1:1/nothing")):
        await store.open()
    await store.close()


async def test_pool_sizes_come_from_the_url_or_keywords(pg_database: str) -> None:
    store = PostgresStore(f"{pg_database}?min_size=2&max_size=3")
    assert store.pool_size == (2, 3)
    assert PostgresStore(f"{pg_database}?max_size=3", max_size=5).pool_size == (1, 5)
    async with store:  # the pool options are not sent to the server as settings
        await store.log.append("pool-url", [(0, b"x")])
        assert await store.log.read_all("pool-url") == [b"x"]


async def test_concurrent_migrations_apply_each_migration_once(empty_pg_database: str) -> None:
    results = await asyncio.gather(*(migrate(empty_pg_database) for _ in range(4)))
    names = [m.name for m in load_migrations("postgres")]
    assert sorted(results, key=len, reverse=True) == [names, [], [], []]
    assert await migrate_url(empty_pg_database) == []


async def _schema_of(url: str) -> dict[str, list[tuple[object, ...]]]:
    conn = await asyncpg.connect(url)
    try:
        columns = await conn.fetch(
            "SELECT table_name, ordinal_position, column_name, data_type, is_nullable,"
            " column_default FROM information_schema.columns WHERE table_schema = 'public'"
            " AND table_name <> 'schema_migrations' ORDER BY 1, 2"
        )
        indexes = await conn.fetch(
            "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'"
            " AND tablename <> 'schema_migrations' ORDER BY 1, 2"
        )
        constraints = await conn.fetch(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)"
            " FROM pg_constraint WHERE connamespace = 'public'::regnamespace"
            " AND conrelid::regclass::text <> 'schema_migrations' ORDER BY 1, 2"
        )
    finally:
        await conn.close()
    return {
        "columns": [tuple(r) for r in columns],
        "indexes": [tuple(r) for r in indexes],
        "constraints": [tuple(r) for r in constraints],
    }


async def test_schema_sql_equals_all_migrations(empty_pg_database: str, pg_database: str) -> None:
    # pg_database was migrated (through the template); empty_pg_database gets schema.sql.
    conn = await asyncpg.connect(empty_pg_database)
    try:
        await conn.execute(load_schema("postgres"))
    finally:
        await conn.close()
    from_schema = await _schema_of(empty_pg_database)
    from_migrations = await _schema_of(pg_database)
    assert from_schema["columns"], "schema.sql created no tables"
    assert from_schema == from_migrations


async def test_a_multi_host_url_connects_to_the_host_that_accepts_writes(
    pg_database: str,
) -> None:
    # The first host refuses connections (a dead primary); the pool moves on to the next.
    dead = free_port()
    parts = urlsplit(pg_database)
    url = urlunsplit(
        parts._replace(
            netloc=f"postgres@127.0.0.1:{dead},{parts.netloc.rpartition('@')[2]}",
            query="target_session_attrs=read-write",
        )
    )
    async with PostgresStore(url, min_size=1, max_size=2) as store:
        await store.log.append("multi", [(0, b"zero")])
        assert await store.log.read("multi") == [(0, b"zero")]
        # Named with every host, never cut at the first comma.
        assert store._db.where == f"127.0.0.1:{dead},{parts.hostname}:{parts.port}{parts.path}"


async def test_a_statement_past_its_command_timeout_fails_and_the_pool_recovers(
    pg_database: str,
) -> None:
    async with PostgresStore(f"{pg_database}?command_timeout=0.2", max_size=1) as store:
        with pytest.raises(StoreUnavailable, match="connection lost or refused"):
            await store._db.fetch("SELECT pg_sleep(30)")
        # The connection was closed, not left waiting on its cancel; the next call works.
        assert (await store._db.fetch("SELECT 1"))[0][0] == 1


def test_a_command_timeout_that_is_not_a_number_is_named() -> None:
    with pytest.raises(ValueError, match="command_timeout='soon' is not a number"):
        PostgresStore("postgresql://127.0.0.1/db?command_timeout=soon")


async def test_a_cancellation_on_a_connection_the_pool_took_back_stays_a_cancellation(
    pg_database: str,
) -> None:
    # A worker draining while its database restarts: the server drops the connection (the
    # pool takes it back at once) and the statement's task is cancelled. Closing the lost
    # connection must not replace the cancellation with a StoreError: that crashed the
    # worker's heartbeat, and the drained worker exited 1 (chaos trial, 2026-12-03).
    from tether.store.postgres.db import PgPool

    pool = PgPool(pg_database, min_size=1, max_size=2)
    await pool.open()
    try:
        with pytest.raises(asyncio.CancelledError):
            async with pool.connection() as conn:
                pid = conn.get_server_pid()
                async with pool.connection() as other:
                    await other.execute("SELECT pg_terminate_backend($1)", pid)
                lost = (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError)
                with pytest.raises(lost):  # the loss reaches the driver, in one form or another
                    await conn.execute("SELECT 1")
                raise asyncio.CancelledError
        async with pool.connection() as conn:  # the pool goes on with a fresh connection
            assert await conn.fetchval("SELECT 1") == 1
    finally:
        await pool.close()
