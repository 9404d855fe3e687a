"""POST /v1/runs/{id}/retry and TetherClient.retry: a failed run reopened over HTTP, on
SQLite and PostgreSQL, finished by the server's worker; a run that did not fail is refused
with 409 `run_not_failed`."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.server.kit import TOKEN, running
from tests.server.test_signals import wait_for
from tether.client import ApiError, TetherClient
from tether.store.base import Store

AGENT = "tests.retry_agents"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def test_a_failed_run_is_retried_over_http(durable_store: Store, tmp_path: Path) -> None:
    marker = tmp_path / "outage"
    marker.touch()
    async with (
        running(durable_store, agents=("demo", AGENT)) as (url, _),
        TetherClient(url, token=TOKEN) as client,
        httpx.AsyncClient(base_url=url) as http,
    ):
        run_id = (await client.start(AGENT, {"outage": str(marker)}))["run_id"]
        await wait_for(client, run_id, "failed")
        failed = await client.get(run_id)
        assert failed["status"] == "failed" and failed["retries"] == []
        [flaky] = [n for n in failed["nodes"] if n["kind"] == "flaky"]
        assert flaky["status"] == "failed"
        assert [a["attempt"] for a in flaky["attempts"]] == [2]

        marker.unlink()
        accepted = await client.retry(run_id)
        assert accepted["run_id"] == run_id and accepted["status"] == "queued"
        # A stream ends at a run's RunFinished: follow the retried run from after it.
        async for event in client.events(run_id, after=failed["records"] - 1):
            if not event.data.get("node_id") and event.data.get("status") == "succeeded":
                break
        else:
            raise AssertionError("the retried run's stream ended before it succeeded")
        done = await client.get(run_id)
        assert done["status"] == "succeeded"
        assert done["result"] == ["answer after attempt 3", "steady"]
        [retry] = done["retries"]
        assert retry["node_ids"] == [flaky["node_id"]] and "model unreachable" in retry["error"]
        [flaky] = [n for n in done["nodes"] if n["kind"] == "flaky"]
        assert flaky["status"] == "completed" and flaky["attempt"] == 3
        assert [(a["attempt"], a["status"]) for a in flaky["attempts"]] == [
            (2, "failed"),
            (3, "completed"),
        ]

        # A run that did not fail: 409 with the API's error shape, and nothing recorded.
        with pytest.raises(ApiError) as err:
            await client.retry(run_id)
        assert (err.value.status, err.value.kind) == (409, "run_not_failed")
        assert "is succeeded, not failed" in str(err.value)
        assert (await client.get(run_id))["records"] == done["records"]
        raw = await http.post(f"/v1/runs/{run_id}/retry", headers=AUTH)
        assert raw.status_code == 409
        assert raw.json()["error"]["type"] == "run_not_failed"
        missing = await http.post("/v1/runs/nope/retry", headers=AUTH)
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "unknown_run"
        assert (await http.post(f"/v1/runs/{run_id}/retry")).status_code == 401
        spec = (await http.get("/openapi.json", headers=AUTH)).json()
        assert "409" in spec["paths"]["/v1/runs/{run_id}/retry"]["post"]["responses"]
