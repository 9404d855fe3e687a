"""Two server processes on one PostgreSQL: a stream served by a replica not running the run."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.server.agents import chain_input, chain_nodes
from tests.server.kit import CHAIN, TOKEN, start_server
from tether.client import RunEvent, TetherClient


async def test_a_replica_that_does_not_run_the_run_streams_it_woken_by_notify(
    tmp_path: Path, pg_database: str
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    # B polls only every 30 s: the run below is over long before, so every record B
    # sends in time came through LISTEN/NOTIFY.
    a = start_server(tmp_path / "a", pg_database, "--workers", "embedded")  # A executes
    b = start_server(tmp_path / "b", pg_database, "--poll", "30")
    try:
        async with TetherClient(a.url, TOKEN) as on_a, TetherClient(b.url, TOKEN) as on_b:
            n, width = 8, 2
            run_id = (await on_a.start(CHAIN, chain_input(n, width, 0.2)))["run_id"]
            records: list[RunEvent] = []
            lags: list[float] = []
            started = time.monotonic()
            async with asyncio.timeout(25):
                async for event in on_b.events(run_id):
                    records.append(event)
                    lags.append(time.time() - event.data["at_us"] / 1e6)
            assert time.monotonic() - started < 25
            assert [r.seq for r in records] == list(range(len(records)))
            assert records[-1].data["status"] == "succeeded"
            completed = [r for r in records if r.data["body"] == "node_completed"]
            assert len(completed) == chain_nodes(n, width)
            # Records written while B was tailing reached it well inside its poll period.
            assert sorted(lags)[len(lags) // 2] < 1.0, lags
            assert (await on_b.get(run_id))["status"] == "succeeded"
            # Either replica lists it.
            assert run_id in [r["run_id"] for r in (await on_b.list())["runs"]]
    finally:
        assert a.stop() == 0
        assert b.stop() == 0
