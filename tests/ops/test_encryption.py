"""Encryption at rest on SQLite and PostgreSQL: nothing plain at rest, rotation, bad keys."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.server.kit import child_env
from tether import Context, Node, NodeResult, Registry, Runtime, Spawn, Status, Store
from tether.blobs import LocalBlobStore
from tether.blobs.sealed import SealedBlobStore, key_id_of
from tether.foundation.crypto import KeyRing, load_ring
from tether.foundation.crypto.seal import address
from tether.foundation.errors import KeyRingError
from tether.model.records import blob_refs, decode_log
from tether.model.values import ref_of

MARKER = "PLAINTEXT-MARKER-7f3a"
secretive = Registry("test.secretive", entry="write")


@secretive.node("write")
async def write(ctx: Context, node: Node) -> NodeResult:
    await ctx.attach((MARKER * 10).encode(), "text/plain")
    output = {"small": MARKER, "big": MARKER * 500, "q": node.input["q"]}
    return NodeResult(output, spawn=[Spawn("read", {"again": MARKER}, key="r")])


@secretive.node("read")
async def read(ctx: Context, node: Node) -> NodeResult:
    (parent,) = node.parent_ids
    out = await ctx.output_of(parent)
    attached = [await ctx.read_blob(ref) for ref in ctx.attachments_of(parent)]
    return NodeResult(
        {"big_ok": out["big"] == MARKER * 500, "attached": attached[0].decode()[: len(MARKER)]},
        is_result=True,
    )


@pytest.fixture
async def blobs(tmp_path: Path) -> AsyncIterator[LocalBlobStore]:
    async with LocalBlobStore(tmp_path / "blobs") as store:
        yield store


def at_rest(blobs: LocalBlobStore) -> list[bytes]:
    return [p.read_bytes() for p in blobs.root.rglob("*") if p.is_file()]


async def log_bytes(store: Store, run_id: str) -> bytes:
    return b"".join(record for _, record in await store.log.read(run_id))


async def test_a_known_plaintext_never_reaches_the_log_or_the_blob_files(
    durable_store: Store, blobs: LocalBlobStore
) -> None:
    ring = KeyRing.new()
    rt = Runtime(durable_store, blobs=blobs, keys=ring)
    outcome = await rt.start(secretive, {"q": MARKER}, run_id="secret")
    assert outcome.status is Status.SUCCEEDED
    assert outcome.result == {"big_ok": True, "attached": MARKER}
    raw = await log_bytes(durable_store, "secret")
    assert MARKER.encode() not in raw and b"PLAINTEXT" not in raw
    files = at_rest(blobs)
    assert len(files) >= 2  # the large output and the attachment
    assert all(MARKER.encode() not in f and key_id_of(f) == "k1" for f in files)
    # Rebuilt from the log by another runtime with the ring, every value opens again.
    graph = await Runtime(durable_store, blobs=blobs, keys=ring).load("secret")
    codec = Runtime(durable_store, blobs=blobs, keys=ring).new_codec()
    node = graph.nodes["root"].completed
    assert node is not None
    assert (await codec.decode(node.output))["big"] == MARKER * 500


async def test_logs_written_without_encryption_stay_readable(
    durable_store: Store, blobs: LocalBlobStore
) -> None:
    await Runtime(durable_store, blobs=blobs).start(secretive, {"q": "plain"}, run_id="old")
    ring = KeyRing.new()
    rt = Runtime(durable_store, blobs=blobs, keys=ring)
    graph = await rt.load("old")
    node = graph.nodes["root"].completed
    assert node is not None
    assert (await rt.new_codec().decode(node.output))["small"] == MARKER


async def test_rotation_keeps_old_data_readable_and_reseals_blobs(
    store: Store, blobs: LocalBlobStore
) -> None:
    ring1 = KeyRing.new("k1")
    await Runtime(store, blobs=blobs, keys=ring1).start(secretive, {"q": "1"}, run_id="one")
    ring2 = ring1.with_new_key("k2")
    rt2 = Runtime(store, blobs=blobs, keys=ring2)
    await rt2.start(secretive, {"q": "2"}, run_id="two")
    records = [r for r in decode_log("two", await store.log.read_all("two"))]
    sealed = [r.node_completed.output.sealed for r in records if r.HasField("node_completed")]
    assert {s.key_id for s in sealed if s.key_id} == {"k2"}
    # k1's values (run one) still open under the rotated ring.
    graph = await rt2.load("one")
    node = graph.nodes["root"].completed
    assert node is not None and (await rt2.new_codec().decode(node.output))["q"] == "1"
    sealed_blobs = rt2.blobs
    assert isinstance(sealed_blobs, SealedBlobStore)
    stored = [info.sha256 async for info in blobs.list()]
    resealed = [await sealed_blobs.reseal(sha256) for sha256 in stored]
    assert any(resealed)
    assert {key_id_of(f) for f in at_rest(blobs)} == {"k2"}
    assert not any([await sealed_blobs.reseal(sha256) for sha256 in stored])
    # A ring with only k2 (same address key) opens every blob now.
    only_k2 = SealedBlobStore(blobs, KeyRing({"k2": ring2.keys["k2"]}, "k2", ring2.address))
    refs = [ref_of(ref) for run_id in ("one", "two")
            for record in decode_log(run_id, await store.log.read_all(run_id))
            for _, ref in blob_refs(record)]  # fmt: skip
    assert refs and all([MARKER.encode() in await only_k2.get(ref) for ref in refs])


async def test_a_wrong_or_missing_key_is_named_and_nothing_is_written(
    store: Store, blobs: LocalBlobStore
) -> None:
    ring = KeyRing.new("k1")
    await Runtime(store, blobs=blobs, keys=ring).start(secretive, {"q": "x"}, run_id="r")
    graph = await Runtime(store).load("r")
    root = graph.nodes["root"].completed
    assert root is not None and root.output.WhichOneof("kind") == "blob"
    small = next(
        s.completed.output
        for s in graph.nodes.values()
        if s.completed is not None and s.completed.output.WhichOneof("kind") == "sealed"
    )
    impostor = KeyRing.new("k1")  # the same id, another key
    for value in (root.output, small):
        with pytest.raises(KeyRingError, match="key id 'k1' does not open"):
            await Runtime(store, blobs=blobs, keys=impostor).new_codec().decode(value)
        with pytest.raises(KeyRingError, match="key id 'k1', which the key ring lacks"):
            await Runtime(store, blobs=blobs, keys=KeyRing.new("k9")).new_codec().decode(value)
    with pytest.raises(KeyRingError, match="no key ring is configured"):
        await Runtime(store).new_codec().decode(small)
    node = root
    before = await store.log.read("r")
    files = at_rest(blobs)
    with pytest.raises(KeyRingError):  # resuming under a wrong ring fails before writing
        await Runtime(store, blobs=blobs, keys=impostor).new_codec().decode(node.output)
    assert await store.log.read("r") == before and at_rest(blobs) == files


def test_addresses_do_not_show_equal_plaintexts_across_rings() -> None:
    one, two = KeyRing.new(), KeyRing.new()
    assert address(one, b"same") == address(one, b"same")
    assert address(one, b"same") != address(two, b"same")
    # Rotation keeps the address key, so a blob's address never changes.
    assert address(one.with_new_key("k2"), b"same") == address(one, b"same")


@pytest.mark.parametrize(
    ("ring", "says"),
    [
        ("not json", "the key ring is not JSON"),
        ('{"current": "k1"}', "expected {"),
        ('{"current": "k1", "keys": {"k1": "%%%"}, "address": "AA=="}', "key 'k1': not valid"),
        ('{"current": "k1", "keys": {"k1": "AAAA"}, "address": "AA=="}', "3 bytes, a key must"),
        ('{"current": "k2", "keys": {"k1": "K1"}, "address": "K1"}', "current key 'k2' is not"),
        ('{"current": "k1", "keys": {"k1": "K1"}}', 'no "address" key'),
        ("@/nonexistent/ring.json", "cannot read it"),
    ],
)
def test_a_malformed_key_ring_is_named(ring: str, says: str) -> None:
    key = KeyRing.new().dump()
    k1 = json.loads(key)["keys"]["k1"]
    with pytest.raises(KeyRingError, match=re.escape(says)):
        load_ring(ring.replace("K1", k1))


def test_keys_from_the_command_line(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "tether"]
    env = child_env()
    out = subprocess.run([*base, "keys", "generate"], env=env, capture_output=True, text=True)
    ring = load_ring(out.stdout)
    assert ring is not None and ring.current == "k1"
    env["TETHER_KEYS"] = out.stdout
    more = subprocess.run([*base, "keys", "generate"], env=env, capture_output=True, text=True)
    rotated = load_ring(more.stdout)
    assert rotated is not None and rotated.current == "k2" and set(rotated.keys) == {"k1", "k2"}
    env["TETHER_KEYS"] = "{broken"
    db = tmp_path / "t.db"
    bad = subprocess.run(
        [*base, "--db", f"sqlite:///{db}", "submit", "demo"],
        env=env, capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert bad.returncode == 2 and "TETHER_KEYS: the key ring is not JSON" in bad.stderr
    assert not db.exists()


async def test_gc_under_encryption_frees_unreferenced_blobs_and_stale_temps(
    store: Store, blobs: LocalBlobStore
) -> None:
    import os
    import time

    from tether.ops.blob_gc import collect_garbage

    ring = KeyRing.new()
    rt = Runtime(store, blobs=blobs, keys=ring)
    await rt.start(secretive, {"q": "kept"}, run_id="kept")
    sealed = rt.blobs
    assert isinstance(sealed, SealedBlobStore)
    orphan = await sealed.put(b"an orphan of a crashed node")
    temp = blobs.root / ".tmp" / "left-by-a-killed-writer.part"
    temp.parent.mkdir(exist_ok=True)
    temp.write_bytes(b"partial")
    old = time.time() - 7200
    for path in [*blobs.root.rglob("*")]:
        if path.is_file():
            os.utime(path, (old, old))
    report = await collect_garbage(store, sealed, grace=3600)
    assert (report.deleted, report.temps_removed) == (1, 1)
    assert not await sealed.exists(orphan.sha256) and not temp.exists()
    graph = await rt.load("kept")
    assert graph.status is Status.SUCCEEDED
