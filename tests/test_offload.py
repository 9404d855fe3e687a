"""Large values go to the blob store and records keep refs (invariants 1 and 2)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.offload_agents import offload
from tether import RecordTooLarge, Runtime, Status, Store, store_from_url
from tether.blobs import BlobError, BlobRef, LocalBlobStore
from tether.cli.app import main
from tether.foundation.ids import child_id
from tether.model.records import Record, blob_refs, decode_log, dump_json
from tether.ops.blob_verify import verify_run

THRESHOLD = 4 * 1024


@pytest.fixture
async def blobs(tmp_path: Path) -> AsyncIterator[LocalBlobStore]:
    async with LocalBlobStore(tmp_path / "blobs") as store:
        yield store


async def records(store: Store, run_id: str) -> list[tuple[int, Record]]:
    """(row size, record) for each row of the run's log."""
    rows = await store.log.read_all(run_id)
    return list(zip(map(len, rows), decode_log(run_id, rows), strict=True))


async def completed(store: Store, run_id: str, node_id: str) -> tuple[int, Any]:
    """(row size, NodeCompleted) of one node; it must be recorded exactly once."""
    found = [
        (size, r.node_completed)
        for size, r in await records(store, run_id)
        if r.WhichOneof("body") == "node_completed" and r.node_completed.node_id == node_id
    ]
    assert len(found) == 1, f"node {node_id} recorded {len(found)} times"
    return found[0]


async def test_large_output_is_a_ref_in_a_small_record_and_children_read_it_whole(
    store: Store, blobs: LocalBlobStore
) -> None:
    rt = Runtime(store, blobs=blobs)
    outcome = await rt.start(offload, {"out": 200_000}, run_id="big")
    assert outcome.status is Status.SUCCEEDED
    assert outcome.result["parent_len"] == 200_000
    size, nc = await completed(store, "big", "root")
    assert nc.output.WhichOneof("kind") == "blob"
    assert size < 1024
    ref = nc.output.blob
    assert ref.media_type == "application/json"
    assert json.loads(await blobs.get(BlobRef(ref.url, ref.size, ref.sha256, ref.media_type))) == {
        "text": "x" * 200_000
    }


async def test_the_threshold_is_on_the_json_bytes(store: Store, blobs: LocalBlobStore) -> None:
    rt = Runtime(store, blobs=blobs, offload_threshold=100)
    # {"text":"xx…"} is 11 bytes of JSON around the text.
    assert len(dump_json({"text": "x" * 89})) == 100
    await rt.start(offload, {"out": 89}, run_id="at")
    await rt.start(offload, {"out": 90}, run_id="over")
    assert (await completed(store, "at", "root"))[1].output.WhichOneof("kind") == "json"
    assert (await completed(store, "over", "root"))[1].output.WhichOneof("kind") == "blob"


async def test_small_values_stay_inline_and_nothing_is_stored(
    store: Store, blobs: LocalBlobStore
) -> None:
    outcome = await Runtime(store, blobs=blobs).start(offload, {"out": 300, "spawn": 300})
    assert outcome.status is Status.SUCCEEDED
    refs = [ref for _, r in await records(store, outcome.run_id) for ref in blob_refs(r)]
    assert refs == []
    assert [b async for b in blobs.list()] == []


async def test_spawn_input_run_input_and_run_result_are_offloaded(
    store: Store, blobs: LocalBlobStore
) -> None:
    rt = Runtime(store, blobs=blobs)
    run_input = {"spawn": 50_000, "big": "i" * 30_000, "result": 70_000}
    outcome = await rt.start(offload, run_input, run_id="all")
    assert outcome.status is Status.SUCCEEDED
    assert outcome.result["input_len"] == 50_000
    assert outcome.result["run_input_len"] == 30_000
    assert outcome.result["result"] == "r" * 70_000
    where = sorted(w for _, r in await records(store, "all") for w, _ in blob_refs(r))
    consumer = child_id("root", "c")
    assert where == sorted(
        [
            f"input of node {consumer}",
            "input of root root",
            f"output of node {consumer}",
            "run input",
            "run result",
        ]
    )
    assert all(size < 1024 for size, _ in await records(store, "all"))
    # Read back from the log alone, by a runtime that never ran it.
    again = await Runtime(store, blobs=blobs).outcome("all")
    assert again.result == outcome.result


def test_show_json_prints_the_result_ref(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, root = f"sqlite:///{tmp_path / 'cli.db'}", tmp_path / "cli-blobs"

    async def run() -> None:
        async with store_from_url(db) as store, LocalBlobStore(root) as blobs:
            await Runtime(store, blobs=blobs).start(offload, {"result": 10_000}, run_id="shown")

    asyncio.run(run())
    assert main(["--db", db, "--blobs", str(root), "show", "shown", "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    ref = view["result"]["$blob"]
    assert ref["url"].startswith(root.as_uri() + "/")
    assert ref["media_type"] == "application/json"


async def test_attached_files_are_listed_in_the_record_and_readable_by_children(
    store: Store, blobs: LocalBlobStore
) -> None:
    outcome = await Runtime(store, blobs=blobs).start(offload, {"attach": 300_000}, run_id="att")
    assert outcome.result["attached"] == [300_000, 600_000]
    _, nc = await completed(store, "att", "root")
    assert [(b.size, b.media_type) for b in nc.blobs] == [
        (300_000, "text/plain"),
        (600_000, "application/x-stream"),
    ]
    report = await verify_run(store, blobs, "att")
    assert report.ok and report.checked == 2


async def test_without_a_blob_store_decoding_a_ref_says_to_configure_one(
    store: Store, blobs: LocalBlobStore
) -> None:
    await Runtime(store, blobs=blobs).start(offload, {"result": 10_000}, run_id="needs")
    with pytest.raises(BlobError, match=r"no blob store is configured.*TETHER_BLOB_URL"):
        await Runtime(store).outcome("needs")


async def test_without_a_blob_store_an_output_over_the_cap_fails_and_says_use_a_blob(
    store: Store,
) -> None:
    rt = Runtime(store)
    small = await rt.start(offload, {"out": 10_000})
    assert small.status is Status.SUCCEEDED  # over the threshold but no store: inline
    outcome = await rt.start(offload, {"out": 70_000}, run_id="capped")
    assert outcome.status is Status.FAILED
    assert "RecordTooLarge" in outcome.reason
    assert "blob" in outcome.reason and "ctx.attach" in outcome.reason
    message = str(RecordTooLarge("r", "n", 70_000, 65_536))
    assert "over the 65536-byte cap" in message and "Runtime(blobs=...)" in message


async def test_a_node_that_returns_a_foreign_or_missing_ref_is_not_recorded(
    store: Store, blobs: LocalBlobStore, tmp_path: Path
) -> None:
    from tether import NodeResult, Registry

    agent = Registry("test.returns_refs", entry="start")
    other = LocalBlobStore(tmp_path / "elsewhere")
    foreign = await other.put(b"not ours")

    @agent.node("start")
    async def start(ctx: Any, node: Any) -> NodeResult:
        return NodeResult("done", blobs=[foreign], is_result=True)

    outcome = await Runtime(store, blobs=blobs).start(agent, run_id="foreign")
    assert outcome.status is Status.PAUSED
    assert "BlobRefRefused" in outcome.reason
    assert [r.WhichOneof("body") for _, r in await records(store, "foreign")] == [
        "run_started",
        "run_paused",
    ]
