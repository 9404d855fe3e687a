"""GET /v1/workers and POST /v1/runs/{id}/upgrade (issue 14), on a real server."""

from __future__ import annotations

import pytest

from tests.agents import uid
from tests.server.kit import running
from tether import Context, Node, Registry, Runtime
from tether.client import ApiError, TetherClient
from tether.store.base import Store
from tether.store.workers import Served, WorkerInfo

from .test_api import TOKEN


async def _noop(ctx: Context, node: Node) -> None:
    return None


async def test_workers_and_upgrade_over_http(durable_store: Store) -> None:
    name = uid("api.up")
    v1 = Registry(name, version="1")
    v1.add("plan", _noop)
    run_id = await Runtime(durable_store).submit(v1, "q")
    v2 = Registry(name, version="2")  # the server's code from here on: `plan` renamed
    v2.add("outline", _noop)
    await durable_store.workers.beat(
        WorkerInfo("w-api", "h", 1, 1.0, ttl=60.0, versions={name: Served("1")}, runs_held=2)
    )
    async with running(durable_store) as (url, server), TetherClient(url, TOKEN) as client:
        listed = (await client.workers())["workers"]
        # Named by its opaque owner id, as run views name owners: no host, no pid.
        mine = [w for w in listed if w["owner"] == server.publish.owner_id("w-api")]
        assert all("host" not in w and "pid" not in w for w in listed)
        assert mine and mine[0]["versions"][name]["version"] == "1" and mine[0]["runs_held"] == 2
        with pytest.raises(ApiError) as refused:
            await client.upgrade(run_id, "2")
        assert refused.value.status == 422 and refused.value.kind == "cannot_upgrade"
        assert "no handler for pending node kind 'plan'" in str(refused.value)
        info = await durable_store.runs.get(run_id)
        assert info is not None and info.agent_version == "1" and info.epoch == 0

        v2b = Registry(name, version="2")  # the same kinds under version 2: it may move
        v2b.add("plan", _noop)
        moved = await client.upgrade(run_id, "2")
        assert moved["agent_version"] == "2" and moved["run_id"] == run_id
        info = await durable_store.runs.get(run_id)
        assert info is not None and info.agent_version == "2"
        with pytest.raises(ApiError) as unknown:
            await client.upgrade("nope", "2")
        assert unknown.value.status == 404
