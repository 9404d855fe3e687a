"""POST /v1/runs/{id}/fork and TetherClient.fork (issue 13): a real server, its embedded
worker running the fork to completion; bad fork points refused, creating nothing."""

from __future__ import annotations

import pytest

from tests.server.agents import chain_input
from tests.server.kit import CHAIN, running
from tether.client import ApiError, TetherClient
from tether.model.records import decode_log
from tether.store.base import Store

from .test_api import TOKEN, wait_status


async def test_fork_over_http_runs_to_the_same_result_and_names_its_source(
    durable_store: Store,
) -> None:
    async with running(durable_store) as (url, _), TetherClient(url, TOKEN) as client:
        run_id = (await client.start(CHAIN, chain_input(3, 2, 0)))["run_id"]
        await wait_status(client, run_id, "succeeded")
        source = await client.get(run_id)
        assert source["forked_from"] is None
        forked = await client.fork(run_id, at_seq=2, budget={"max_nodes": 100})
        assert forked["status"] == "queued" and forked["forked_from"] == run_id
        fork_id = forked["run_id"]
        assert forked["urls"]["self"] == f"/v1/runs/{fork_id}"
        await wait_status(client, fork_id, "succeeded")
        fork = await client.get(fork_id)
        assert fork["result"] == source["result"]
        assert fork["forked_from"] == {"run_id": run_id, "seq": 2, "overridden_node_ids": []}
        assert fork["budget"]["limits"]["max_nodes"] == 100
        src_rows = await durable_store.log.read_all(run_id)
        assert (await durable_store.log.read_all(fork_id))[1:3] == src_rows[1:3]
        done = [
            r.node_completed.node_id
            for r in decode_log(fork_id, await durable_store.log.read_all(fork_id))
            if r.HasField("node_completed")
        ]
        assert len(done) == len(set(done)) == source["budget"]["used"]["nodes"]
        # "+N": N more than the source had used at the fork point, as `tether fork --budget
        # nodes=+N` (not N more than it has used by now).
        then = (await client.get(run_id, at_seq=2))["budget"]["used"]["nodes"]
        assert then < source["budget"]["used"]["nodes"]
        rest = source["budget"]["used"]["nodes"] - then
        more = await client.fork(run_id, at_seq=2, budget={"max_nodes": f"+{rest}", "max_cost": 2})
        limits = (await client.get(more["run_id"]))["budget"]["limits"]
        assert (limits["max_nodes"], limits["max_cost"]) == (then + rest, 2)
        await wait_status(client, more["run_id"], "succeeded")  # exactly enough
        short = await client.fork(run_id, at_seq=2, budget={"max_nodes": "+1"})
        await wait_status(client, short["run_id"], "paused")  # one more is not enough
        assert (await client.get(short["run_id"]))["budget"]["limits"]["max_nodes"] == then + 1
        listed = {r["run_id"]: r for r in (await client.list())["runs"]}
        assert listed[fork_id]["forked_from"] == {"run_id": run_id, "seq": 2}
        assert listed[run_id]["forked_from"] is None


@pytest.mark.parametrize(
    ("body", "status", "kind", "says"),
    [
        ({"at_seq": 9999}, 422, "bad_fork", "cannot fork at seq 9999"),
        ({"before_node": "ghost"}, 422, "bad_fork", "has no node ghost"),
        ({}, 422, "bad_fork", "exactly one fork point"),
        ({"at_seq": -1}, 422, "validation", "at_seq"),
        ({"at_seq": 1, "set_outputs": {"ghost": 1}}, 422, "bad_fork", "ghost not completed"),
        ({"at_seq": 1, "budget": {"max_nodes": "lots"}}, 422, "validation", "'lots': not a"),
    ],
)
async def test_bad_fork_over_http_is_refused_creating_nothing(
    durable_store: Store, body: dict[str, object], status: int, kind: str, says: str
) -> None:
    async with running(durable_store) as (url, _), TetherClient(url, TOKEN) as client:
        run_id = (await client.start(CHAIN, chain_input(2, 1, 0)))["run_id"]
        await wait_status(client, run_id, "succeeded")
        with pytest.raises(ApiError) as refused:
            await client._call("POST", f"/v1/runs/{run_id}/fork", json=body)
        assert refused.value.status == status and says in str(refused.value)
        assert refused.value.kind == kind
        with pytest.raises(ApiError) as unknown:
            await client.fork("no-such-run", at_seq=0)
        assert unknown.value.status == 404
        assert [r["run_id"] for r in (await client.list())["runs"]] == [run_id]


async def test_a_run_as_it_was_at_a_seq_over_http(durable_store: Store) -> None:
    async with running(durable_store) as (url, _), TetherClient(url, TOKEN) as client:
        run_id = (await client.start(CHAIN, chain_input(3, 1, 0)))["run_id"]
        await wait_status(client, run_id, "succeeded")
        now = await client.get(run_id)
        assert now["at_seq"] is None
        for seq in range(now["records"]):
            then = await client.get(run_id, at_seq=seq)
            assert (then["at_seq"], then["records"]) == (seq, seq + 1)
            done = [n for n in then["nodes"] if n["status"] == "completed"]
            assert len(done) == then["budget"]["used"]["nodes"] <= now["budget"]["used"]["nodes"]
        assert then["status"] == "succeeded" and then["result"] == now["result"]
        for at, status, kind in (("9999", 404, "unknown_seq"), ("x", 400, "bad_at")):
            with pytest.raises(ApiError) as refused:
                await client._call("GET", f"/v1/runs/{run_id}", params={"at": at})
            assert (refused.value.status, refused.value.kind) == (status, kind)
