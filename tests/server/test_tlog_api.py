"""GET /v1/runs/{id}/export, POST /v1/runs/import and the client's export/import_tlog
(issue 13): a real server streams a run out of one store and loads it into another."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.server.agents import chain, chain_input
from tests.server.kit import CHAIN, TOKEN, running
from tether import Runtime, export_run, store_from_url
from tether.blobs import LocalBlobStore
from tether.client import ApiError, TetherClient
from tether.server.limits import Limits
from tether.store.base import Store

from .test_api import wait_status


async def test_a_run_exported_over_http_imports_into_another_server_once(
    durable_store: Store, tmp_path: Path
) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    async with (
        running(durable_store, blobs=blobs) as (url, _),
        TetherClient(url, TOKEN) as client,
    ):
        run_id = (await client.start(CHAIN, chain_input(3, 2, 0)))["run_id"]
        await wait_status(client, run_id, "succeeded")
        data = b"".join([c async for c in client.export(run_id, blobs=True)])
        with pytest.raises(ApiError) as unknown:
            _ = [c async for c in client.export("nope")]
        assert (unknown.value.status, unknown.value.kind) == (404, "unknown_run")
        source_rows = await durable_store.log.read_all(run_id)

    async with store_from_url(f"sqlite:///{tmp_path / 'other.db'}") as other:
        other_blobs = LocalBlobStore(tmp_path / "other-blobs")
        async with (
            running(other, blobs=other_blobs) as (url, _),
            TetherClient(url, TOKEN) as client,
        ):
            first = await client.import_tlog(data)
            assert first["run_id"] == run_id and first["created"] == [run_id]
            assert first["already"] is False and first["records"] == len(source_rows)
            again = await client.import_tlog(data)
            assert again["already"] is True and again["created"] == []
            assert (await client.get(run_id))["status"] == "succeeded"
            assert await other.log.read_all(run_id) == source_rows

            with pytest.raises(ApiError) as bad:
                await client.import_tlog(data[:-3])
            assert (bad.value.status, bad.value.kind) == (422, "bad_tlog")
            assert "the request body: not imported: truncated" in str(bad.value)


async def test_an_import_has_its_own_body_limit(durable_store: Store, tmp_path: Path) -> None:
    async with store_from_url("memory:") as source:
        rt = Runtime(source)
        run_id = (await rt.start(chain, chain_input(40, 2, 0))).run_id
        data = b"".join([c async for c in export_run(source, run_id)])
    assert len(data) > 2000
    small = Limits(max_body_bytes=2000, max_import_bytes=len(data))
    async with (
        running(durable_store, limits=small) as (url, _),
        TetherClient(url, TOKEN) as client,
    ):
        assert (await client.import_tlog(data))["created"][0] == run_id  # over max_body
        with pytest.raises(ApiError) as big:
            await client.import_tlog(data + b"x")
        assert big.value.status == 413
        with pytest.raises(ApiError) as body:  # every other route keeps max_body
            await client.start(CHAIN, {"pad": "x" * 3000})
        assert body.value.status == 413
