"""Retention and erasure on SQLite, PostgreSQL and memory: prune, delete, the lock."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.offload_agents import offload
from tether import Runtime, Status, Store, store_from_url
from tether.blobs import LocalBlobStore
from tether.blobs.base import fanout
from tether.foundation.errors import InvalidDuration, RunIsLive, UnknownRun
from tether.model.records import encode, run_paused
from tether.ops import delete_run, parse_duration, prune
from tether.ops.blob_gc import collect_garbage
from tether.ops.retention import RETENTION_LOCK, retention_pass
from tether.store import RunInfo, RunTable

HOUR = 3600.0
LIVE = (Status.QUEUED, Status.RUNNING, Status.PAUSED)


async def make_run(
    store: Store,
    run_id: str,
    status: Status,
    *,
    parent: str | None = None,
    rows: int = 3,
    agent: str = "agent",
) -> None:
    """A run row at `status` with `rows` log rows of ROW bytes each."""
    info = RunInfo(run_id=run_id, agent=agent, status=Status.QUEUED, parent_run_id=parent)
    await store.runs.create(info, filler(0))
    await store.log.append(run_id, [(seq, filler(seq)) for seq in range(1, rows)])
    await store.runs.set_status(run_id, status)


def filler(seq: int) -> bytes:
    """A valid record of ROW bytes (a pause with a reason naming its seq)."""
    return encode(run_paused(f"{seq:08d}"))


ROW = len(filler(0))


async def run_ids(store: Store) -> set[str]:
    return {info.run_id for info in await store.runs.list(limit=1000)}


@pytest.fixture
async def blobs(tmp_path: Path) -> AsyncIterator[LocalBlobStore]:
    async with LocalBlobStore(tmp_path / "blobs") as store:
        yield store


async def test_prune_deletes_finished_runs_and_children_in_bounded_batches(store: Store) -> None:
    for i in range(7):
        status = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)[i % 3]
        await make_run(store, f"top{i}", status, rows=5)
        await make_run(store, f"top{i}.child", Status.SUCCEEDED, parent=f"top{i}", rows=4)
        await make_run(store, f"top{i}.grandchild", Status.FAILED, parent=f"top{i}.child")
    report = await prune(
        store, older_than=HOUR, now=time.time() + 2 * HOUR, batch_runs=3, batch_rows=4
    )
    assert (report.runs, report.child_runs, report.skipped) == (7, 14, 0)
    assert (report.rows, report.bytes) == (7 * 12, 7 * 12 * ROW)
    assert sorted(report.run_ids) == [f"top{i}" for i in range(7)]
    assert await run_ids(store) == set()
    for i in range(7):
        assert await store.log.read(f"top{i}") == []
        assert await store.log.read(f"top{i}.grandchild") == []


async def test_prune_never_touches_live_runs_or_families_with_a_live_member(
    store: Store,
) -> None:
    for status in LIVE:
        await make_run(store, f"live-{status.value}", status)
    await make_run(store, "done", Status.SUCCEEDED)
    await make_run(store, "parent", Status.SUCCEEDED)
    await make_run(store, "parent.child", Status.RUNNING, parent="parent")
    report = await prune(store, older_than=HOUR, now=time.time() + 2 * HOUR)
    assert (report.runs, report.skipped, report.run_ids) == (1, 1, ["done"])
    assert await run_ids(store) == {
        "live-queued",
        "live-running",
        "live-paused",
        "parent",
        "parent.child",
    }
    assert len(await store.log.read("parent")) == 3
    # The store itself refuses to delete a live run, whatever its caller asks.
    await store.retention.delete_log(["live-running"], limit=100)
    assert await store.retention.delete_runs(["live-running", "parent.child"]) == 0
    assert len(await store.log.read("live-running")) == 3


async def test_prune_keeps_runs_newer_than_the_cutoff_and_filters(store: Store) -> None:
    await make_run(store, "old-ok", Status.SUCCEEDED, agent="a")
    await make_run(store, "old-failed", Status.FAILED, agent="a")
    await make_run(store, "old-other-agent", Status.SUCCEEDED, agent="b")
    await asyncio.sleep(0.01)
    cut = time.time()
    await asyncio.sleep(0.01)
    await make_run(store, "new", Status.SUCCEEDED, agent="a")
    dry = await prune(store, older_than=HOUR, now=cut + HOUR, dry_run=True)
    assert (dry.runs, dry.rows, dry.dry_run) == (3, 9, True)
    assert len(await run_ids(store)) == 4
    by_status = await prune(store, older_than=HOUR, now=cut + HOUR, statuses=[Status.FAILED])
    assert by_status.run_ids == ["old-failed"]
    by_agent = await prune(store, older_than=HOUR, now=cut + HOUR, agent="b")
    assert by_agent.run_ids == ["old-other-agent"]
    rest = await prune(store, older_than=HOUR, now=cut + HOUR)
    assert rest.run_ids == ["old-ok"]
    assert await run_ids(store) == {"new"}
    with pytest.raises(ValueError, match="not running"):
        await prune(store, older_than=HOUR, statuses=[Status.RUNNING])


async def test_delete_run_removes_it_its_children_and_blobs_no_other_run_uses(
    store: Store, blobs: LocalBlobStore
) -> None:
    rt = Runtime(store, blobs=blobs)
    await rt.start(offload, {"out": 20_000, "attach": 5_000, "result": 9_000}, run_id="gone")
    # The same attachment bytes, another output: the attachments are shared.
    await rt.start(offload, {"out": 30_000, "attach": 5_000}, run_id="stays")
    before = {info.sha256: info.size async for info in blobs.list()}
    await make_run(store, "gone.child", Status.SUCCEEDED, parent="gone")
    log_rows = len(await store.log.read("gone")) + 3
    report = await delete_run(store, "gone", blobs=blobs)
    assert (report.runs, report.rows) == (2, log_rows)
    assert report.log_bytes > 0
    after = {info.sha256: info.size async for info in blobs.list()}
    assert report.blobs == len(before) - len(after) == 2  # its output and result
    assert report.blob_bytes == sum(before[s] for s in set(before) - set(after))
    assert report.blobs_kept == 2
    assert await run_ids(store) == {"stays"}
    assert await store.log.read("gone") == []
    graph = await Runtime(store, blobs=blobs).load("stays")
    assert graph.status is Status.SUCCEEDED


async def test_delete_refuses_a_live_run_or_family_and_an_unknown_one(store: Store) -> None:
    await make_run(store, "running", Status.RUNNING)
    await make_run(store, "parent", Status.SUCCEEDED)
    await make_run(store, "parent.child", Status.PAUSED, parent="parent")
    with pytest.raises(RunIsLive, match="'running' was not deleted: it is running"):
        await delete_run(store, "running")
    with pytest.raises(RunIsLive, match=r"sub-agent run 'parent\.child' is paused"):
        await delete_run(store, "parent")
    with pytest.raises(UnknownRun, match="'nope'"):
        await delete_run(store, "nope")
    assert await run_ids(store) == {"running", "parent", "parent.child"}
    assert len(await store.log.read("parent")) == 3


async def test_pruned_runs_blobs_are_collectable_by_the_next_gc(
    store: Store, blobs: LocalBlobStore
) -> None:
    rt = Runtime(store, blobs=blobs)
    await rt.start(offload, {"out": 20_000, "result": 9_000}, run_id="old")
    await rt.start(offload, {"out": 25_000}, run_id="kept")
    kept = {info.sha256 async for info in blobs.list()}
    report = await prune(store, older_than=HOUR, now=time.time() + 2 * HOUR)
    assert report.runs == 2
    await rt.start(offload, {"out": 25_000}, run_id="kept")  # the same bytes, a new run
    for info in [i async for i in blobs.list()]:
        old = time.time() - 2 * HOUR
        os.utime(blobs.root / fanout(info.sha256), (old, old))
    gc = await collect_garbage(store, blobs, grace=HOUR)
    assert gc.deleted == 2
    assert {info.sha256 async for info in blobs.list()} < kept


async def test_one_retention_pass_at_a_time(store_url: str, store: Store) -> None:
    await make_run(store, "done", Status.SUCCEEDED)
    other = store if store_url == "memory:" else store_from_url(store_url)
    async with other:
        async with store.retention.exclusive(RETENTION_LOCK) as held:
            assert held
            async with other.retention.exclusive(RETENTION_LOCK) as second:
                assert not second
            assert await retention_pass(other, older_than=1e-9) is None
            assert await run_ids(store) == {"done"}
        async with other.retention.exclusive(RETENTION_LOCK) as again:
            assert again
        await asyncio.sleep(0.01)
        report = await retention_pass(other, older_than=1e-3)
    assert report is not None and report.run_ids == ["done"]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("30m", 1800),
        ("12h", 43200),
        ("30d", 2592000),
        ("2w", 1209600),
        ("1d12h", 129600),
        ("1.5h", 5400),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "d30", "30 days", "0d", "-1d", "1y", "1d 2h"])
def test_a_bad_duration_names_itself(text: str) -> None:
    with pytest.raises(InvalidDuration, match=f"duration {text!r} is not valid"):
        parse_duration(text)


async def test_runs_are_counted_by_status(store: Store) -> None:
    for i, status in enumerate([Status.QUEUED, Status.SUCCEEDED, Status.SUCCEEDED, Status.FAILED]):
        await make_run(store, f"r{i}", status)
    expected = {Status.QUEUED: 1, Status.SUCCEEDED: 2, Status.FAILED: 1}
    assert await store.runs.count_by_status() == expected
    # The generic answer (paging through list) agrees with the backend's query.
    assert await RunTable.count_by_status(store.runs) == expected
