"""Two server processes on one PostgreSQL: a stream served by a replica not running the run."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.server.agents import chain_input, chain_nodes
from tests.server.kit import CHAIN, TOKEN, start_server
from tether.client import RunEvent, TetherClient


async def test_a_replica_that_does_not_run_the_run_streams_it_woken_by_notify(
    tmp_path: Path, pg_database: str
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    # B polls only once an hour: every record it sends came through LISTEN/NOTIFY (were
    # NOTIFY lost, the stream would stall and the timeout below fail the test).
    a = start_server(tmp_path / "a", pg_database, "--workers", "embedded")  # A executes
    b = start_server(tmp_path / "b", pg_database, "--poll", "3600")
    try:
        async with TetherClient(a.url, TOKEN) as on_a, TetherClient(b.url, TOKEN) as on_b:
            n, width = 8, 2
            run_id = (await on_a.start(CHAIN, chain_input(n, width, 0.2)))["run_id"]
            records: list[RunEvent] = []
            async with asyncio.timeout(120):  # a bound on the wait, not a measurement
                async for event in on_b.events(run_id):
                    records.append(event)
            assert [r.seq for r in records] == list(range(len(records)))
            assert records[-1].data["status"] == "succeeded"
            completed = [r for r in records if r.data["body"] == "node_completed"]
            assert len(completed) == chain_nodes(n, width)
            assert (await on_b.get(run_id))["status"] == "succeeded"
            # Either replica lists it.
            assert run_id in [r["run_id"] for r in (await on_b.list())["runs"]]
    finally:
        assert a.stop() == 0
        assert b.stop() == 0
