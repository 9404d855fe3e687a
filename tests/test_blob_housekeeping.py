"""`tether blobs gc` and `tether blobs verify`, on a local directory and on S3 (moto)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.offload_agents import offload
from tests.s3server import make_s3_store
from tether import Budget, Runtime, Status, Store, store_from_url
from tether.blobs import BlobStore, LocalBlobStore
from tether.blobs.base import fanout
from tether.cli.app import main
from tether.foundation.ids import ROOT_ID, child_id
from tether.model.records import blob_refs, decode_log
from tether.ops.blob_gc import collect_garbage
from tether.ops.blob_verify import verify_run
from tether.store.base import LogStore

HOUR = 3600.0
SPEC = {"out": 20_000, "attach": 5_000, "result": 9_000}


@pytest.fixture
async def blobs(tmp_path: Path) -> AsyncIterator[LocalBlobStore]:
    async with LocalBlobStore(tmp_path / "blobs") as store:
        yield store


def age(blobs: LocalBlobStore, sha256: str, seconds: float) -> None:
    old = time.time() - seconds
    os.utime(blobs.root / fanout(sha256), (old, old))


async def stored(blobs: BlobStore) -> set[str]:
    return {info.sha256 async for info in blobs.list()}


async def test_gc_deletes_only_unreferenced_blobs_older_than_the_grace(
    store: Store, blobs: LocalBlobStore
) -> None:
    await Runtime(store, blobs=blobs).start(offload, SPEC, run_id="kept")
    referenced = await stored(blobs)
    assert len(referenced) == 4  # output, two attachments, result
    old = await blobs.put(b"orphan from a crashed node")
    young = await blobs.put(b"orphan whose record is about to be appended")
    for sha in [*referenced, old.sha256]:
        age(blobs, sha, 2 * HOUR)

    dry = await collect_garbage(store, blobs, grace=HOUR, dry_run=True)
    assert (dry.deleted, dry.freed_bytes, dry.dry_run) == (1, old.size, True)
    assert await stored(blobs) == referenced | {old.sha256, young.sha256}

    report = await collect_garbage(store, blobs, grace=HOUR)
    assert (report.runs, report.referenced) == (1, 4)
    assert (report.deleted, report.freed_bytes) == (1, old.size)
    assert report.kept == 5
    assert await stored(blobs) == referenced | {young.sha256}
    assert (await verify_run(store, blobs, "kept")).ok


async def test_gc_scans_every_run_page_and_sub_runs(
    store: Store, blobs: LocalBlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tether.ops.blob_gc as gc

    monkeypatch.setattr(gc, "_RUNS_PAGE", 2)
    rt = Runtime(store, blobs=blobs)
    for i in range(5):
        await rt.start(offload, {"out": 10_000 + i}, run_id=f"r{i}")
    report = await collect_garbage(store, blobs, grace=0, now=time.time() + HOUR)
    assert (report.runs, report.referenced, report.deleted) == (5, 5, 0)


class PutDuringScan(LogStore):
    """A log whose reads let another writer put a blob while gc is scanning."""

    def __init__(self, inner: LogStore, blobs: BlobStore) -> None:
        self.inner, self.blobs, self.put_shas = inner, blobs, []

    async def append(self, run_id, entries, *, epoch=None):  # type: ignore[no-untyped-def]
        await self.inner.append(run_id, entries, epoch=epoch)

    async def read(self, run_id, *, after_seq=-1):  # type: ignore[no-untyped-def]
        ref = await self.blobs.put(f"written while scanning {run_id}".encode())
        self.put_shas.append(ref.sha256)
        return await self.inner.read(run_id, after_seq=after_seq)


async def test_gc_never_deletes_a_blob_put_after_the_scan_started(
    store: Store, blobs: LocalBlobStore
) -> None:
    await Runtime(store, blobs=blobs).start(offload, {"out": 10_000}, run_id="r")
    spy = PutDuringScan(store.log, blobs)
    store.log = spy
    report = await collect_garbage(store, blobs, grace=0)
    assert report.deleted == 0
    assert set(spy.put_shas) <= await stored(blobs)


async def test_a_re_put_of_an_old_orphan_makes_it_young_again(
    store: Store, blobs: LocalBlobStore
) -> None:
    orphan = await blobs.put(b"same bytes, stored again by a re-run")
    age(blobs, orphan.sha256, 2 * HOUR)
    again = await blobs.put(b"same bytes, stored again by a re-run")
    assert again == orphan
    assert (await collect_garbage(store, blobs, grace=HOUR)).deleted == 0


async def test_verify_names_each_bad_ref(store: Store, blobs: LocalBlobStore) -> None:
    await Runtime(store, blobs=blobs).start(offload, SPEC, run_id="v")
    good = await verify_run(store, blobs, "v")
    assert (good.ok, good.checked) == (True, 4)
    rows = await store.log.read_all("v")
    refs = {where: ref for r in decode_log("v", rows) for where, ref in blob_refs(r)}
    (blobs.root / fanout(refs["run result"].sha256)).unlink()
    out = blobs.root / fanout(refs["output of node root"].sha256)
    out.write_bytes(out.read_bytes()[:-1])
    bad = await verify_run(store, blobs, "v")
    # The result is the consumer's output, one blob: reported once, where it first appears.
    assert sorted((b.where, b.problem.split(":")[0]) for b in bad.bad) == [
        (f"output of node {child_id(ROOT_ID, 'c')}", "BlobNotFound"),
        ("output of node root", "BlobCorrupt"),
    ]
    assert all(b.ref.url in b.problem for b in bad.bad)


def test_cli_blobs_gc_and_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = f"sqlite:///{tmp_path / 'data' / 'tether.db'}"

    async def setup() -> tuple[int, str]:
        async with store_from_url(db) as store, LocalBlobStore(tmp_path / "data" / "blobs") as b:
            await Runtime(store, blobs=b).start(offload, SPEC, run_id="c")
            orphan = await b.put(b"x" * 1234)
            age(b, orphan.sha256, 2 * HOUR)
            return orphan.size, orphan.url

    size, orphan_url = asyncio.run(setup())
    # The default blob store is the `blobs` directory beside the SQLite file.
    assert main(["--db", db, "blobs", "gc", "--dry-run"]) == 0
    assert f"would free 1 blobs ({size} bytes)" in capsys.readouterr().out
    assert main(["--db", db, "blobs", "gc"]) == 0
    assert f"freed 1 blobs ({size} bytes)" in capsys.readouterr().out.replace("\n", " ")
    assert main(["--db", db, "blobs", "verify", "c"]) == 0
    assert "all intact" in capsys.readouterr().out

    gone = [p for p in (tmp_path / "data" / "blobs").rglob("*") if p.is_file()]
    assert len(gone) == 4  # the orphan was freed, the run's four blobs were kept
    for path in gone:
        path.unlink()
    assert main(["--db", db, "blobs", "verify", "c"]) == 1
    out = capsys.readouterr().out.replace("\n", "")
    assert all(path.as_uri() in out for path in gone)
    assert "BlobNotFound" in out and "4 bad" in out
    assert orphan_url not in out


async def test_s3_end_to_end_offload_resume_verify_gc(
    store: Store, s3_endpoint: str, s3_bucket: str
) -> None:
    async with make_s3_store(s3_endpoint, s3_bucket, "runs") as blobs:
        paused = await Runtime(store, blobs=blobs).start(
            offload, SPEC, run_id="s3", budget=Budget(max_nodes=1)
        )
        assert paused.status is Status.PAUSED
    # Another replica, with its own client, picks the run up from the log and S3.
    async with make_s3_store(s3_endpoint, s3_bucket, "runs") as blobs:
        outcome = await Runtime(store, blobs=blobs).resume("s3", budget=Budget())
        assert outcome.status is Status.SUCCEEDED
        assert outcome.result["parent_len"] == 20_000
        assert outcome.result["attached"] == [5_000, 10_000]
        assert len(outcome.result["result"]) == 9_000
        assert (await Runtime(store, blobs=blobs).outcome("s3")).result == outcome.result
        report = await verify_run(store, blobs, "s3")
        assert (report.ok, report.checked) == (True, 4)

        orphan = await blobs.put(b"an orphan on S3")
        # S3 cannot back-date an object: gc is asked to run an hour from now instead.
        now = time.time() + 2 * HOUR
        gc = await collect_garbage(store, blobs, grace=HOUR, now=now)
        assert (gc.referenced, gc.deleted, gc.freed_bytes) == (4, 1, orphan.size)
        assert not await blobs.exists(orphan)
        assert (await verify_run(store, blobs, "s3")).ok
