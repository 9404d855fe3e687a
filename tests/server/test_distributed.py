"""Distributed mode on PostgreSQL: the server queues, a `tether worker` process executes.

The server here runs in the test's process with `--workers external`; it never executes a
run. Streams, cancels and resumes reach the worker only through the database.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.server.agents import chain_input, chain_nodes
from tests.server.kit import CHAIN, TOKEN, ServerProcess, running, start_server, start_worker
from tether.client import ApiError, RunEvent, TetherClient
from tether.model.records import decode_log
from tether.store import Status, Store, store_from_url

SLOW = chain_input(n=40, width=2, delay=0.3)


@pytest.fixture
async def pg_store(pg_database: str) -> AsyncIterator[Store]:
    store = store_from_url(pg_database)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@pytest.fixture
def worker(tmp_path: Path, pg_database: str) -> Iterator[ServerProcess]:
    # A short lease: the worker renews (and so sees cancel requests) every 0.5 s.
    proc = start_worker(tmp_path, pg_database, "--lease-ttl", "1.5", "--grace", "5")
    try:
        yield proc
    finally:
        assert proc.stop() == 0


async def records_of(store: Store, run_id: str) -> list[str]:
    return [r.WhichOneof("body") for r in decode_log(run_id, await store.log.read_all(run_id))]


async def until_owned_by_worker(client: TetherClient, run_id: str, server_owner: str) -> None:
    """Follow the stream until the worker has resumed the run (its RunResumed record)."""
    async for event in client.events(run_id):
        if event.data["body"] == "run_resumed" and event.data.get("owner") != server_owner:
            return


async def test_a_worker_executes_what_the_server_queued_and_the_server_streams_it(
    pg_store: Store, worker: ServerProcess
) -> None:
    async with (
        running(pg_store, agents=(CHAIN,), workers="external") as (url, server),
        TetherClient(url, TOKEN) as client,
    ):
        n, width = 6, 2
        accepted = await client.start(CHAIN, chain_input(n, width, 0.1))
        assert accepted["status"] in ("queued", "running")  # the worker may be that quick
        run_id = accepted["run_id"]
        events: list[RunEvent] = []
        async with asyncio.timeout(30):
            async for event in client.events(run_id):
                events.append(event)
        assert not server.runtime.executing  # nothing of it ran in the server's process
        # Every record once, in order, as the log holds them.
        assert [e.seq for e in events] == list(range(len(events)))
        assert [e.data["body"] for e in events] == await records_of(pg_store, run_id)
        assert events[-1].data["status"] == "succeeded"
        assert sum(e.data["body"] == "node_completed" for e in events) == chain_nodes(n, width)
        row = await pg_store.runs.get(run_id)
        assert row is not None and row.status is Status.SUCCEEDED and row.owner is None


async def test_cancel_of_a_run_a_worker_owns_is_recorded_by_the_worker(
    pg_store: Store, worker: ServerProcess
) -> None:
    async with (
        running(pg_store, agents=(CHAIN,), workers="external") as (url, server),
        TetherClient(url, TOKEN) as client,
    ):
        run_id = (await client.start(CHAIN, SLOW))["run_id"]
        async with asyncio.timeout(20):
            await until_owned_by_worker(client, run_id, server.runtime.owner)
        row = await pg_store.runs.get(run_id)
        assert row is not None and row.status is Status.RUNNING
        assert row.owner is not None and row.owner != server.runtime.owner
        cancelled = await client.cancel(run_id)
        assert cancelled["status"] == "cancelled"
        row = await pg_store.runs.get(run_id)
        assert row is not None and row.status is Status.CANCELLED
        # Stop the worker: whatever it had in flight is settled, and nothing followed.
        assert worker.stop() == 0
        bodies = await records_of(pg_store, run_id)
        assert bodies[-1] == "run_finished" and bodies.count("run_finished") == 1
        run = await client.get(run_id)
        assert run["status"] == "cancelled" and run["reason"] == "cancelled by request"
        with pytest.raises(ApiError) as err:
            await client.cancel(run_id)
        assert err.value.status == 409


async def test_cancel_of_a_queued_run_nobody_owns_is_recorded_by_the_server(
    pg_store: Store,
) -> None:
    async with (
        running(pg_store, agents=(CHAIN,), workers="external") as (url, _),
        TetherClient(url, TOKEN) as client,
    ):
        run_id = (await client.start(CHAIN, SLOW))["run_id"]
        assert (await client.cancel(run_id))["status"] == "cancelled"
        assert await records_of(pg_store, run_id) == ["run_started", "run_finished"]
        row = await pg_store.runs.get(run_id)
        assert row is not None and row.status is Status.CANCELLED and row.owner is None
        # A worker arriving later finds nothing to claim.
        assert await pg_store.leases.claim("late-worker", 10, 5.0) == []


async def test_a_cancel_racing_a_claim_lands_once(pg_store: Store) -> None:
    """The server's cancel and a worker's claim of one queued run, at the same moment."""
    async with running(pg_store, agents=(CHAIN,), workers="external") as (_, server):
        for _ in range(10):
            run_id = await server.runtime.submit(CHAIN, SLOW)
            status, claims = await asyncio.gather(
                server.launcher.cancel(run_id), pg_store.leases.claim("racer", 1, 5.0)
            )
            if claims:  # the worker won: the cancel is a flag its claim or renewal sees
                assert status is Status.RUNNING
                assert (await pg_store.leases.renew("racer", claims, 5.0)).cancel == [run_id]
                assert await records_of(pg_store, run_id) == ["run_started"]
                assert await pg_store.leases.release(run_id, claims[0].epoch, Status.CANCELLED)
            else:  # the server won: its RunFinished is the only record after the start
                assert status is Status.CANCELLED
                assert await records_of(pg_store, run_id) == ["run_started", "run_finished"]


async def test_resume_with_a_larger_budget_reaches_the_worker(
    pg_store: Store, worker: ServerProcess
) -> None:
    async with (
        running(pg_store, agents=(CHAIN,), workers="external") as (url, server),
        TetherClient(url, TOKEN) as client,
    ):
        start = await client.start(CHAIN, chain_input(3, 1, 0), budget={"max_nodes": 2})
        run_id = start["run_id"]
        async with asyncio.timeout(20):
            async for event in client.events(run_id):
                if event.data["body"] == "run_paused":
                    break
        assert (await client.get(run_id))["reason"] == "budget: node limit 2 reached"
        resumed = await client.resume(run_id, budget={"max_nodes": 50})
        assert resumed["status"] == "queued"
        async with asyncio.timeout(20):
            async for _ in client.events(run_id):
                pass
        run = await client.get(run_id)
        assert run["status"] == "succeeded" and run["budget"]["limits"]["max_nodes"] == 50
        assert not server.runtime.executing
        # The server recorded the new limits under its own claim; the worker then took the
        # run up at a later epoch and ran it to the end under them.
        log = decode_log(run_id, await pg_store.log.read_all(run_id))
        resumes = [r.run_resumed for r in log if r.WhichOneof("body") == "run_resumed"]
        ours = [r for r in resumes if r.owner == server.runtime.owner]
        assert len(ours) == 1 and ours[0].limits.max_nodes == 50
        assert resumes[-1].owner != server.runtime.owner
        assert resumes[-1].epoch > ours[0].epoch


def test_serve_defaults_to_external_workers_on_postgres(tmp_path: Path, pg_database: str) -> None:
    proc = start_server(tmp_path, pg_database)
    try:
        assert "workers external" in proc.banner
    finally:
        assert proc.stop(signal.SIGTERM) == 0
