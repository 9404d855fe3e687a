"""GET /v1/runs?usage=1: each row's usage is read off its log, at most MAX_USAGE_LOADS logs
per request (the console refreshes this list every two seconds); a finished run's usage is
kept and costs no read the next time."""

from __future__ import annotations

import httpx
import pytest

import tether
from tests.server.agents import chain_input, chain_nodes
from tests.server.kit import CHAIN, TOKEN, running
from tether.engine.runtime import Runtime
from tether.server import listing
from tether.store.base import Status, Store

AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def test_usage_reads_at_most_its_cap_of_logs_and_keeps_finished_runs(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listing, "MAX_USAGE_LOADS", 3)
    agent = tether.resolve_agent(CHAIN)
    runtime = Runtime(sqlite_store)
    await runtime.submit(agent, chain_input(2, 1, 0), run_id="queued-one")  # the oldest row
    for n in (2, 3, 4, 5, 6):
        outcome = await runtime.start(agent, chain_input(n, 1, 0))
        assert outcome.status is Status.SUCCEEDED
    async with (
        running(sqlite_store, workers="none") as (url, server),
        httpx.AsyncClient(base_url=url, headers=AUTH) as http,
    ):
        first = (await http.get("/v1/runs?usage=1&limit=10")).json()
        assert first["usage_partial"] is True
        usages = [row["usage"] for row in first["runs"]]
        assert len(usages) == 6
        assert sum(u is not None for u in usages) == 3  # the newest three rows, finished runs
        assert usages[3:] == [None, None, None]
        # The three read were finished runs: kept, so the next request reads the rest.
        second = (await http.get("/v1/runs?usage=1&limit=10")).json()
        assert second["usage_partial"] is False
        by_id = {row["run_id"]: row["usage"] for row in second["runs"]}
        assert all(u is not None for u in by_id.values())
        for row in second["runs"]:
            if row["run_id"] != "queued-one":
                graph = await runtime.load(row["run_id"])
                assert by_id[row["run_id"]]["nodes"] == graph.completed_count
        assert sorted(u["nodes"] for k, u in by_id.items() if k != "queued-one") == sorted(
            chain_nodes(n, 1) for n in (2, 3, 4, 5, 6)
        )
        # A run that has not finished is read again each time, never kept.
        assert server.usage.get("queued-one") is None
        assert len([k for k in by_id if server.usage.get(k) is not None]) == 5
        # Without usage=1 nothing is read and the answer has no usage fields.
        plain = (await http.get("/v1/runs?limit=10")).json()
        assert "usage_partial" not in plain and "usage" not in plain["runs"][0]


def test_the_usage_cache_keeps_the_most_recently_used() -> None:
    cache = listing.UsageCache(size=2)
    cache.keep("a", {"nodes": 1})
    cache.keep("b", {"nodes": 2})
    assert cache.get("a") == {"nodes": 1}  # a is now the most recent
    cache.keep("c", {"nodes": 3})
    assert cache.get("b") is None and cache.get("a") == {"nodes": 1}
    assert cache.get("c") == {"nodes": 3}
