"""POST /v1/runs/{id}/signals/{key} and TetherClient.signal: events over HTTP."""

from __future__ import annotations

import httpx
import pytest

from tests.server.kit import TOKEN, running
from tether.client import ApiError, TetherClient
from tether.store.base import Store

APPROVALS = "tests.waits_agents:approvals"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def wait_for(client: TetherClient, run_id: str, status: str) -> dict[str, object]:
    async for event in client.events(run_id):
        if event.data.get("status") == status and not event.data.get("node_id"):
            return event.data
    raise AssertionError(f"run {run_id} ended without reaching {status}")


async def test_events_over_http_answer_waits_and_a_worker_finishes_the_run(
    durable_store: Store,
) -> None:
    agents = ("demo", APPROVALS)
    async with (
        running(durable_store, agents=agents) as (url, _),
        TetherClient(url, token=TOKEN) as client,
        httpx.AsyncClient(base_url=url) as http,
    ):
        run_id = (await client.start(APPROVALS, {"n": 2}))["run_id"]
        parked = await wait_for(client, run_id, "waiting")
        assert parked["keys"] == ["approve-0", "approve-1"]
        view = await client.get(run_id)
        assert [w["key"] for w in view["waits"]] == ["approve-0", "approve-1"]
        assert view["waits"][0]["data"]["tool"] == "delete_file"

        cases = [
            ("nope", "approve-0", {"approve": True}, 404, "unknown_run"),
            (run_id, "approve-7", {"approve": True}, 404, "unknown_wait"),
            (run_id, "approve-0", {"approve": "yes"}, 422, "bad_payload"),
        ]
        for rid, key, payload, status, kind in cases:
            with pytest.raises(ApiError) as err:
                await client.signal(rid, key, payload)
            assert (err.value.status, err.value.kind) == (status, kind), err.value
        bad = await http.post(
            f"/v1/runs/{run_id}/signals/approve-0", headers=AUTH, content=b'{"approve": tru'
        )
        assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_json"
        unauth = await http.post(f"/v1/runs/{run_id}/signals/approve-0", json={"approve": True})
        assert unauth.status_code == 401

        first = await client.signal(run_id, "approve-1", {"approve": False}, event_id="ev-1")
        assert first["duplicate"] is False and isinstance(first["seq"], int)
        again = await http.post(
            f"/v1/runs/{run_id}/signals/approve-1",
            headers={**AUTH, "Idempotency-Key": "ev-1"},
            json={"approve": False},
        )
        assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
        with pytest.raises(ApiError) as err:
            await client.signal(run_id, "approve-1", {"approve": True}, event_id="ev-2")
        assert (err.value.status, err.value.kind) == (409, "wait_completed")

        await client.signal(run_id, "approve-0", {"approve": True})
        await wait_for(client, run_id, "succeeded")
        done = await client.get(run_id)
        assert done["result"] == [[0, "done"], [1, "rejected"]]
