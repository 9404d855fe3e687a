"""Faults around blobs: a crash between put and append, damaged blobs, hostile refs."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.offload_agents import offload
from tether import Budget, Runtime, Status, Store
from tether.blobs import BlobRef, BlobRefRefused, LocalBlobStore
from tether.blobs.base import fanout
from tether.foundation.ids import ROOT_ID, child_id
from tether.model.records import (
    BlobRefPb,
    NodeCompleted,
    NodeSpec,
    Record,
    RunFinished,
    RunStatus,
    Value,
    decode_log,
    encode,
    json_value,
    now_us,
)
from tether.model.values import ref_of
from tether.ops.blob_gc import referenced_blobs
from tether.ops.blob_verify import verify_run

ROOT = Path(__file__).parent.parent

# Runs the offload agent and SIGKILLs its own process right after the first put of a
# blob with the given media type: the blob is durable, the record not yet appended.
_KILLED_RUN = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from tether import Runtime, store_from_url
    from tether.blobs import LocalBlobStore
    from tests.offload_agents import offload

    db, root, media_type, spec = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]

    class KillAfterPut(LocalBlobStore):
        async def put(self, data, media_type_="application/octet-stream"):
            ref = await super().put(data, media_type_)
            if media_type_ == media_type:
                print(ref.url, flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            return ref

    async def main():
        async with store_from_url(db) as store:
            rt = Runtime(store, blobs=KillAfterPut(root))
            await rt.start(offload, eval(spec), run_id="crash")

    asyncio.run(main())
    """
)


@pytest.fixture
async def blobs(tmp_path: Path) -> AsyncIterator[LocalBlobStore]:
    async with LocalBlobStore(tmp_path / "blobs") as store:
        yield store


def bodies(rows: list[bytes]) -> list[str]:
    return [str(r.WhichOneof("body")) for r in decode_log("run", rows)]


@pytest.mark.parametrize(
    ("media_type", "spec"),
    [("application/json", {"out": 100_000}), ("text/plain", {"attach": 10_000})],
    ids=["offloaded-output", "attachment"],
)
async def test_a_crash_between_put_and_append_leaves_an_orphan_and_the_node_runs_again_once(
    tmp_path: Path,
    durable_store: Store,
    blobs: LocalBlobStore,
    monkeypatch: pytest.MonkeyPatch,
    media_type: str,
    spec: dict[str, int],
) -> None:
    store = durable_store
    executions = tmp_path / "executions"
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}",
        "TETHER_TEST_EXECUTIONS": str(executions),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _KILLED_RUN,
        store.url,
        str(blobs.root),
        media_type,
        repr(spec),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == -signal.SIGKILL, err.decode()
    orphan_url = out.decode().strip()
    orphan = blobs.resolve(orphan_url)
    assert (blobs.root / fanout(orphan)).is_file()
    # Invariant 1: the node ran and its blob is durable, but nothing points to the blob.
    assert executions.read_text().splitlines() == ["crash:root"]
    assert bodies(await store.log.read_all("crash")) == ["run_started"]
    assert orphan not in (await referenced_blobs(store, blobs))[1]
    assert (await verify_run(store, blobs, "crash")).ok

    monkeypatch.setenv("TETHER_TEST_EXECUTIONS", str(executions))
    # The killed process still holds its lease for a few seconds: take the run over, as an
    # operator who knows the owner is dead would (its epoch fences anything it left).
    outcome = await Runtime(store, blobs=blobs).resume("crash", force=True)
    assert outcome.status is Status.SUCCEEDED
    consumer = f"crash:{child_id(ROOT_ID, 'c')}"
    assert executions.read_text().splitlines() == ["crash:root", "crash:root", consumer]
    completed = [
        r.node_completed.node_id
        for r in decode_log("crash", await store.log.read_all("crash"))
        if r.WhichOneof("body") == "node_completed"
    ]
    assert completed == [ROOT_ID, child_id(ROOT_ID, "c")]
    # The re-run stored the same bytes under the same ref, which is now referenced.
    assert orphan in (await referenced_blobs(store, blobs))[1]
    assert (await verify_run(store, blobs, "crash")).ok


async def _paused_after_root(store: Store, blobs: LocalBlobStore) -> tuple[BlobRef, list[bytes]]:
    """Run until the root's large output is recorded, then pause; return its ref and the log."""
    outcome = await Runtime(store, blobs=blobs).start(
        offload, {"out": 50_000}, run_id="dmg", budget=Budget(max_nodes=1)
    )
    assert outcome.status is Status.PAUSED
    rows = await store.log.read_all("dmg")
    nc = decode_log("dmg", rows)[1].node_completed
    assert nc.node_id == ROOT_ID
    return ref_of(nc.output.blob), rows


@pytest.mark.parametrize("damage", ["missing", "truncated", "flipped"])
async def test_a_damaged_blob_stops_the_reader_naming_the_ref_and_loses_nothing(
    store: Store, blobs: LocalBlobStore, damage: str
) -> None:
    ref, rows = await _paused_after_root(store, blobs)
    path = blobs.root / fanout(ref.sha256)
    good = path.read_bytes()
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(good[:-10])
    else:
        path.write_bytes(good[:100] + bytes([good[100] ^ 1]) + good[101:])
    consumer = child_id(ROOT_ID, "c")

    outcome = await Runtime(store, blobs=blobs).resume("dmg", budget=Budget())
    assert outcome.status is Status.PAUSED
    error = {"missing": "BlobNotFound", "truncated": "BlobCorrupt", "flipped": "BlobCorrupt"}
    assert f"node {consumer}: {error[damage]}" in outcome.reason
    assert ref.url in outcome.reason
    after = await store.log.read_all("dmg")
    assert after[: len(rows)] == rows  # every recorded node is still there
    assert bodies(after[len(rows) :]) == ["run_resumed", "run_paused"]
    report = await verify_run(store, blobs, "dmg")
    assert [(b.ref, b.where) for b in report.bad] == [(ref, "output of node root")]

    # Repaired from its source, the run goes on from where it stopped.
    path.write_bytes(good)
    done = await Runtime(store, blobs=blobs).resume("dmg")
    assert done.status is Status.SUCCEEDED
    assert done.result["parent_len"] == 50_000


class CountingStore(LocalBlobStore):
    """Counts reads that reach the disk."""

    reads = 0

    def _read_chunks(self, sha256: str) -> AsyncIterator[bytes]:
        CountingStore.reads += 1
        return super()._read_chunks(sha256)


def _hostile_urls(tmp_path: Path, root: Path, sha256: str) -> list[str]:
    return [
        (tmp_path / "elsewhere").as_uri() + "/" + fanout(sha256),
        root.as_uri() + "/../elsewhere/" + fanout(sha256),
        "s3://someone-elses-bucket/" + fanout(sha256),
        "file:///etc/passwd",
    ]


async def test_a_hostile_ref_in_a_record_is_refused_and_never_fetched(
    tmp_path: Path, store: Store
) -> None:
    CountingStore.reads = 0
    async with CountingStore(tmp_path / "blobs") as blobs:
        other = LocalBlobStore(tmp_path / "elsewhere")
        secret = await other.put(b'{"text": "a secret"}', "application/json")
        for i, url in enumerate(_hostile_urls(tmp_path, blobs.root, secret.sha256)):
            run_id = f"hostile{i}"
            rt = Runtime(store, blobs=blobs)
            await rt.create(offload, {}, run_id=run_id)
            # A forged record: the root "completed" with an output that points elsewhere.
            hostile = Value(blob=BlobRefPb(url=url, size=secret.size, sha256=secret.sha256))
            spawned = NodeSpec(
                node_id=child_id(ROOT_ID, "c"),
                kind="consume",
                parent_ids=[ROOT_ID],
                input=json_value({"pad": ""}),
            )
            nc = NodeCompleted(node_id=ROOT_ID, kind="produce", output=hostile, spawned=[spawned])
            finished = RunFinished(status=RunStatus.RUN_STATUS_SUCCEEDED, result=hostile)
            await store.log.append(
                run_id,
                [
                    (1, encode(Record(at_us=now_us(), node_completed=nc))),
                ],
            )
            outcome = await rt.resume(run_id)
            assert outcome.status is Status.PAUSED
            assert "BlobRefRefused" in outcome.reason and url in outcome.reason
            report = await verify_run(store, blobs, run_id)
            assert [b.problem.split(":")[0] for b in report.bad] == ["BlobRefRefused"]
            await store.log.append(
                run_id, [(4, encode(Record(at_us=now_us(), run_finished=finished)))]
            )
            with pytest.raises(BlobRefRefused, match="refused"):
                await rt.outcome(run_id)
    assert CountingStore.reads == 0
