"""Crypto-shredding on SQLite and PostgreSQL: per-run data keys, `runs delete --shred`, and
what a fork, a restored backup of the blobs and an exported `.tlog` read afterwards."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.kit import child_env
from tether import Context, Node, NodeResult, Registry, Runtime, Spawn, Status, Store
from tether.blobs import LocalBlobStore
from tether.blobs.sealed import SealedBlobStore, key_id_of
from tether.foundation.crypto import KeyRing
from tether.foundation.crypto.runkeys import DataShredded
from tether.foundation.errors import CannotShred, KeyRingError
from tether.model.records import decode_log
from tether.model.run_view import run_view
from tether.ops import delete_run
from tether.ops.tlog.export import export_run
from tether.ops.tlog.load import import_run
from tether.store.sqlite import SqliteStore

MARKER = "SHRED-ME-5c1e"
shreddable = Registry("test.shreddable", entry="write", per_run_keys=True)


@shreddable.node("write")
async def write(ctx: Context, node: Node) -> NodeResult:
    await ctx.attach((MARKER * 10).encode(), "text/plain")
    output = {"small": MARKER, "big": MARKER * 500, "q": node.input["q"]}
    return NodeResult(output, spawn=[Spawn("read", {"again": MARKER}, key="r")])


@shreddable.node("read")
async def read(ctx: Context, node: Node) -> NodeResult:
    (parent,) = node.parent_ids
    out = await ctx.output_of(parent)  # {"$shredded": ...} once the source is shredded
    seen = out.get("small", out)
    return NodeResult({"seen": seen, "mine": "fork-data"}, is_result=True)


plain = Registry("test.unshreddable", entry="write")
plain.add("write", write)
plain.add("read", read)


@pytest.fixture
async def blobs(tmp_path: Path) -> AsyncIterator[LocalBlobStore]:
    async with LocalBlobStore(tmp_path / "blobs") as store:
        yield store


def output_of(graph: Any, node_id: str) -> Any:
    done = graph.nodes[node_id].completed
    assert done is not None
    return done.output


async def test_a_run_with_its_own_key_seals_under_it_and_reads_back(
    durable_store: Store, blobs: LocalBlobStore
) -> None:
    ring = KeyRing.new()
    rt = Runtime(durable_store, blobs=blobs, keys=ring)
    outcome = await rt.start(shreddable, {"q": MARKER}, run_id="own")
    assert outcome.status is Status.SUCCEEDED and outcome.result["seen"] == MARKER
    records = decode_log("own", await durable_store.log.read_all("own"))
    outputs = [r.node_completed.output for r in records if r.HasField("node_completed")]
    assert {out.WhichOneof("kind") for out in outputs} == {"sealed", "blob"}
    sealed = [out.sealed.key_id for out in outputs]
    assert {k for k in sealed if k} == {"run:own"}
    assert records[0].run_started.input.sealed.key_id == "run:own"
    files = [p.read_bytes() for p in blobs.root.rglob("*") if p.is_file()]
    assert files and {key_id_of(f) for f in files} == {"run:own"}
    assert not any(MARKER.encode() in f for f in files)
    # Another process with the ring reads it (the run key fetched from the store).
    graph = await Runtime(durable_store, blobs=blobs, keys=ring).load("own")
    codec = Runtime(durable_store, blobs=blobs, keys=ring).new_codec()
    assert (await codec.decode(output_of(graph, "root")))["big"] == MARKER * 500
    # The same run's key is no other run's: a ring without the store's row cannot open it.
    row = (await durable_store.keys.get(["own"]))["own"]
    assert row.wrapped is not None and MARKER.encode() not in row.wrapped


async def test_shredding_leaves_a_live_fork_a_backup_and_a_tlog_unreadable_but_loadable(
    durable_store: Store, blobs: LocalBlobStore, tmp_path: Path
) -> None:
    store = durable_store
    ring = KeyRing.new()
    rt = Runtime(store, blobs=blobs, keys=ring)
    assert (await rt.start(shreddable, {"q": "1"}, run_id="src")).status is Status.SUCCEEDED
    # A live fork that references the source's first record, continued to its end.
    fk = await rt.fork("src", at_seq=1)
    done = await rt.resume(fk)
    assert done.status is Status.SUCCEEDED and done.result == {"seen": MARKER, "mine": "fork-data"}
    keys = await store.keys.get(["src", fk])
    assert keys["src"].wrapped != keys[fk].wrapped  # the fork has its own key
    fk_records = decode_log(fk, await store.log.read_all(fk))
    assert fk_records[-2].node_completed.output.sealed.key_id == f"run:{fk}"
    # A backup of the blob store and an export, taken before the shred.
    backup = tmp_path / "backup"
    shutil.copytree(blobs.root, backup)
    tlog = b"".join([chunk async for chunk in export_run(store, "src")])
    assert MARKER.encode() not in tlog

    report = await delete_run(store, "src", blobs=rt.blobs, shred=True)
    assert report.shredded == 1 and report.rows > 0
    row = (await store.keys.get(["src"]))["src"]
    assert row.wrapped is None and row.shredded_at is not None

    # The fork loads, its own data reads, the source's rows it holds read as shredded.
    fresh = Runtime(store, blobs=blobs, keys=ring)
    graph = await fresh.load(fk)
    assert graph.status is Status.SUCCEEDED
    codec = fresh.new_codec()
    gone = await codec.decode(output_of(graph, "root"))
    assert gone == {"$shredded": {"run_id": "src", "shredded_at": row.shredded_at}}
    assert await codec.decode(graph.finished.run_finished.result) == {
        "seen": MARKER,
        "mine": "fork-data",
    }
    assert (await codec.decode(graph.started.input)) == gone  # seq 0: a copy
    run_view(graph, outputs=True)  # a page of it renders
    # A fork made now and continued reads the marker, and is not stopped by it.
    again = await fresh.resume(await fresh.fork(fk, at_seq=1))
    assert again.status is Status.SUCCEEDED
    assert again.result["seen"]["$shredded"]["run_id"] == "src"

    # The blob store restored from the backup: the source's blobs are there, unreadable.
    shutil.rmtree(blobs.root)
    shutil.copytree(backup, blobs.root)
    src_blob = next(r for r in fk_records if r.HasField("node_completed")).node_completed.output
    assert src_blob.WhichOneof("kind") == "blob"
    assert (await Runtime(store, blobs=blobs, keys=ring).new_codec().decode(src_blob)) == gone
    sealed = Runtime(store, blobs=blobs, keys=ring).new_codec().blobs
    assert isinstance(sealed, SealedBlobStore)
    from tether.model.values import ref_of

    with pytest.raises(DataShredded, match="crypto-shredded"):
        await sealed.get(ref_of(src_blob.blob))

    # The export imported again (a restore): loadable, its values shredded.
    async def chunks() -> AsyncIterator[bytes]:
        yield tlog

    await import_run(store, chunks())
    back = await fresh.load("src")
    assert (await fresh.new_codec().decode(output_of(back, "root"))) == gone


async def test_shred_refuses_a_run_without_its_own_key(
    durable_store: Store, blobs: LocalBlobStore
) -> None:
    ring = KeyRing.new()
    rt = Runtime(durable_store, blobs=blobs, keys=ring)
    await rt.start(plain, {"q": "1"}, run_id="ring-only")
    with pytest.raises(CannotShred, match="no data key of its own"):
        await delete_run(durable_store, "ring-only", blobs=rt.blobs, shred=True)
    assert await durable_store.runs.get("ring-only") is not None
    with pytest.raises(KeyRingError, match="needs a key ring"):
        await Runtime(durable_store).start(shreddable, {"q": "1"})
    # Runtime(per_run_keys=True) gives every run one.
    every = Runtime(durable_store, blobs=blobs, keys=ring, per_run_keys=True)
    await every.start(plain, {"q": "1"}, run_id="every")
    assert "every" in await durable_store.keys.get(["every"])


def test_runs_delete_shred_on_the_command_line(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    ring = KeyRing.new()

    async def setup() -> None:
        async with SqliteStore(db) as store, LocalBlobStore(tmp_path / "blobs") as blobs:
            rt = Runtime(store, blobs=blobs, keys=ring)
            await rt.start(shreddable, {"q": "1"}, run_id="cli-src")
            await rt.start(plain, {"q": "1"}, run_id="cli-plain")

    async def check() -> None:
        async with SqliteStore(db) as store:
            assert (await store.keys.get(["cli-src"]))["cli-src"].wrapped is None
            assert await store.runs.get("cli-plain") is not None

    asyncio.run(setup())
    env = {**child_env(), "TETHER_KEYS": ring.dump(), "TETHER_BLOB_URL": str(tmp_path / "blobs")}
    # The ring rotated: the run key is wrapped again under the new current key.
    env["TETHER_KEYS"] = ring.with_new_key("k2").dump()
    rotate = [sys.executable, "-m", "tether", "--db", f"sqlite:///{db}", "keys", "rotate"]
    turned = subprocess.run(rotate, env=env, capture_output=True, text=True)
    assert turned.returncode == 0, turned.stderr
    assert "wrapped 1 run keys again under it" in " ".join(turned.stdout.split())
    base = [sys.executable, "-m", "tether", "--db", f"sqlite:///{db}", "runs", "delete"]
    out = subprocess.run([*base, "--shred", "cli-src"], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "shredded 1 run keys, then deleted run cli-src" in " ".join(out.stdout.split())
    bad = subprocess.run([*base, "--shred", "cli-plain"], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "no data key of its own" in " ".join(bad.stderr.split())
    asyncio.run(check())


async def test_rotation_wraps_run_keys_again_so_the_old_ring_key_can_go(
    durable_store: Store, blobs: LocalBlobStore
) -> None:
    from tether.foundation.crypto.runkeys import rewrap_all, wrapped_under

    ring1 = KeyRing.new("k1")
    rt = Runtime(durable_store, blobs=blobs, keys=ring1)
    await rt.start(shreddable, {"q": MARKER}, run_id="rot")
    await rt.start(shreddable, {"q": MARKER}, run_id="gone")
    await delete_run(durable_store, "gone", blobs=rt.blobs, shred=True)
    ring2 = ring1.with_new_key("k2")
    # (The store may hold other tests' runs: a PostgreSQL database is shared by the module.)
    done, _, _ = await rewrap_all(ring2, durable_store.keys)
    assert done >= 1 and (await rewrap_all(ring2, durable_store.keys))[0] == 0
    gone = (await durable_store.keys.get(["gone"]))["gone"]
    assert gone.wrapped is None  # a shredded key stays destroyed
    row = (await durable_store.keys.get(["rot"]))["rot"]
    assert row.wrapped is not None and wrapped_under(row.wrapped) == "k2"
    # A ring without k1 reads the run: its values are under its own key, wrapped by k2.
    only_k2 = KeyRing({"k2": ring2.keys["k2"]}, "k2", ring2.address)
    reader = Runtime(durable_store, blobs=blobs, keys=only_k2)
    graph = await reader.load("rot")
    assert (await reader.new_codec().decode(output_of(graph, "root")))["big"] == MARKER * 500
