"""Export and import (issue 13): a run, its sub-agent runs and blobs as one `.tlog` file,
loaded into another store all or nothing; bad files are refused with the reason."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import asyncpg
import pytest

from tests.agents import randomgraph, uid
from tests.offload_agents import offload
from tests.test_fork_children import family
from tests.test_fork_refs import chain
from tests.waits_agents import approvals
from tether import Budget, Runtime, Status, Store, store_from_url
from tether.blobs import LocalBlobStore
from tether.foundation.errors import BadTlog, ImportConflict, RunExists
from tether.model.records import blob_refs, decode_log
from tether.ops.tlog import export_run, import_tlog, read_tlog
from tether.ops.tlog.format import BLOB, END, HEADER, RECORD, RUN, FrameWriter
from tether.store.base import RunFilter, RunInfo
from tether.store.forks import NewRun


async def chunks_of(data: bytes, size: int = 1000) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


async def exported(store: Store, run_id: str, blobs: LocalBlobStore | None = None) -> bytes:
    return b"".join([c async for c in export_run(store, run_id, blobs=blobs)])


async def imported(store: Store, data: bytes, blobs: LocalBlobStore | None = None) -> list[str]:
    tlog = await read_tlog("run.tlog", chunks_of(data))
    return (await import_tlog(store, tlog, blobs=blobs)).created


async def family_of(store: Store, run_id: str) -> dict[str, list[bytes]]:
    """Every run of the family and its records."""
    runs = {run_id: await store.log.read_all(run_id)}
    for child in await store.runs.list(where=RunFilter(parent_run_id=run_id)):
        runs |= await family_of(store, child.run_id)
    return runs


async def _open(stack: AsyncExitStack, url: str) -> Store:
    if url.startswith("postgresql://"):
        conn = await asyncpg.connect(url)
        await conn.execute("TRUNCATE run_log, runs, run_refs, run_forks")
        await conn.close()
    return await stack.enter_async_context(store_from_url(url))


@pytest.fixture(
    params=[("sqlite", "postgres"), ("postgres", "sqlite")], ids=lambda p: "-to-".join(p)
)
async def two_stores(
    request: pytest.FixtureRequest, tmp_path: Path, pg_database: str
) -> AsyncIterator[tuple[Store, Store]]:
    urls = {"sqlite": f"sqlite:///{tmp_path}/tether.db", "postgres": pg_database}
    async with AsyncExitStack() as stack:
        source = await _open(stack, urls[request.param[0]])
        target = await _open(stack, urls[request.param[1]])
        yield source, target


async def test_a_run_and_its_sub_agent_runs_round_trip_between_backends(
    two_stores: tuple[Store, Store],
) -> None:
    source, target = two_stores
    outcome = await Runtime(source).start(family, {"n": 3, "gate": None}, run_id=uid("fam"))
    runs = await family_of(source, outcome.run_id)
    assert len(runs) == 2  # the parent and its sub-agent run
    data = await exported(source, outcome.run_id)

    assert sorted(await imported(target, data)) == sorted(runs)
    assert await family_of(target, outcome.run_id) == runs  # byte for byte
    for run_id in runs:
        mine, theirs = await source.runs.get(run_id), await target.runs.get(run_id)
        assert mine is not None and theirs is not None
        assert (theirs.agent, theirs.status, theirs.parent_run_id, theirs.agent_version) == (
            mine.agent,
            mine.status,
            mine.parent_run_id,
            mine.agent_version,
        )
    # The file is the same whichever store it is exported from.
    assert await exported(target, outcome.run_id) != b""
    again = await read_tlog("again", chunks_of(await exported(target, outcome.run_id)))
    first = await read_tlog("first", chunks_of(data))
    assert [r.rows for r in again.runs] == [r.rows for r in first.runs]


async def test_a_paused_run_is_imported_paused_and_continues_in_its_new_store(
    two_stores: tuple[Store, Store],
) -> None:
    source, target = two_stores
    paused = await Runtime(source).start(
        chain, {"i": 0, "n": 8}, run_id=uid("paused"), budget=Budget(max_nodes=3)
    )
    assert paused.status is Status.PAUSED
    assert await imported(target, await exported(source, paused.run_id)) == [paused.run_id]
    info = await target.runs.get(paused.run_id)
    assert info is not None and info.status is Status.PAUSED
    done = await Runtime(target).resume(paused.run_id, budget=Budget(max_nodes=20))
    assert (done.status, done.result) == (Status.SUCCEEDED, 7)


async def test_invariant_12_importing_the_same_file_twice_is_a_no_op(durable_store: Store) -> None:
    runtime = Runtime(durable_store)
    outcome = await runtime.start(family, {"n": 2, "gate": None}, run_id=uid("twice"))
    data = await exported(durable_store, outcome.run_id)
    before = await family_of(durable_store, outcome.run_id)
    assert await imported(durable_store, data) == []  # exported from this very store
    assert await imported(durable_store, data) == []
    assert await family_of(durable_store, outcome.run_id) == before


async def test_invariant_12_a_different_run_under_the_same_id_refuses_the_whole_file(
    two_stores: tuple[Store, Store],
) -> None:
    source, target = two_stores
    run_id = uid("clash")
    outcome = await Runtime(source).start(family, {"n": 2, "gate": None}, run_id=run_id)
    data = await exported(source, outcome.run_id)
    children = [r for r in await family_of(source, run_id) if r != run_id]
    await Runtime(target).submit(chain, {"i": 0, "n": 2}, run_id=run_id)  # another run
    with pytest.raises(ImportConflict, match=f"run '{run_id}': this store holds a different"):
        await imported(target, data)
    for child in children:  # nothing of the file was written
        assert await target.runs.get(child) is None


async def test_a_fork_is_exported_self_contained(two_stores: tuple[Store, Store]) -> None:
    source, target = two_stores
    runtime = Runtime(source)
    long = await runtime.start(chain, {"i": 0, "n": 12}, run_id=uid("src"))
    fork_id = await runtime.fork(long.run_id, at_seq=6)
    rows = await source.log.read_all(fork_id)
    assert await source.forks.segments(fork_id)  # its prefix is a reference there

    assert await imported(target, await exported(source, fork_id)) == [fork_id]
    assert await target.runs.get(long.run_id) is None  # the source was not exported
    assert await target.log.read_all(fork_id) == rows  # the prefix came as plain records
    assert await target.forks.segments(fork_id) == []
    origin = (await target.forks.origins([fork_id]))[fork_id]
    assert (origin.source_run_id, origin.source_seq) == (long.run_id, 6)
    assert (await Runtime(target).resume(fork_id)).result == long.result


async def test_blobs_travel_with_the_file_and_land_in_the_new_blob_store(
    two_stores: tuple[Store, Store], tmp_path: Path
) -> None:
    source, target = two_stores
    here, there = LocalBlobStore(tmp_path / "here"), LocalBlobStore(tmp_path / "there")
    rt = Runtime(source, blobs=here, offload_threshold=100)
    outcome = await rt.start(offload, {"out": 5000, "spawn": 300}, run_id=uid("big"))
    records = decode_log(outcome.run_id, await source.log.read_all(outcome.run_id))
    refs = {ref.sha256 for r in records for _, ref in blob_refs(r)}
    assert len(refs) >= 2

    without = await exported(source, outcome.run_id)
    assert len(without) < 5000  # records only: the refs point into `here`
    data = await exported(source, outcome.run_id, blobs=here)
    assert await imported(target, data, blobs=there) == [outcome.run_id]
    for sha256 in refs:
        assert await there.exists(sha256)
    loaded = await Runtime(target, blobs=there).load(outcome.run_id)
    moved = decode_log(outcome.run_id, await target.log.read_all(outcome.run_id))
    assert all(ref.url.startswith(there.root_url) for r in moved for _, ref in blob_refs(r))
    codec = Runtime(target, blobs=there).new_codec()
    result = moved[-1].run_finished.result
    assert await codec.decode(result) == outcome.result
    assert loaded.status is Status.SUCCEEDED


# -- refusals: nothing half-imported ------------------------------------------------------


async def _refused(
    store: Store, data: bytes, match: str, blobs: LocalBlobStore | None = None
) -> None:
    """The file is refused as BadTlog matching `match`, and the store holds no run."""
    with pytest.raises(BadTlog, match=match):
        await imported(store, data, blobs)
    assert await store.runs.list() == []


async def _sample(tmp_path: Path) -> tuple[bytes, LocalBlobStore]:
    """A finished run with a sub-agent run and two blobs, exported with its blobs."""
    blobs = LocalBlobStore(tmp_path / "sample")
    async with store_from_url("memory:") as store:
        rt = Runtime(store, blobs=blobs, offload_threshold=100)
        outcome = await rt.start(offload, {"out": 500, "spawn": 300}, run_id=uid("sample"))
        return await exported(store, outcome.run_id, blobs=blobs), blobs


async def test_a_truncated_file_is_refused(durable_store: Store, tmp_path: Path) -> None:
    data, _ = await _sample(tmp_path)
    for cut in (0, 5, 12, 30, len(data) // 2, len(data) - 1):
        await _refused(durable_store, data[:cut], "truncated|not a tether run file")


async def test_a_newer_format_version_is_refused(durable_store: Store, tmp_path: Path) -> None:
    data, _ = await _sample(tmp_path)
    newer = data[:8] + struct.pack(">I", 2) + data[12:]
    await _refused(durable_store, newer, "format version 2; this tether reads up to version 1")


async def test_a_blob_whose_bytes_do_not_match_its_hash_is_refused(
    durable_store: Store, tmp_path: Path
) -> None:
    data, _ = await _sample(tmp_path)
    fresh = LocalBlobStore(tmp_path / "fresh")
    at = data.index(b"x" * 50)  # inside a blob frame's bytes
    damaged = data[:at] + b"y" + data[at + 1 :]
    await _refused(durable_store, damaged, "its bytes hash to", blobs=fresh)
    assert [b async for b in fresh.list()] == []  # checked before any blob is written


async def test_invariant_12_a_damaged_byte_anywhere_imports_nothing(
    durable_store: Store, tmp_path: Path
) -> None:
    data, _ = await _sample(tmp_path)
    for at in range(12, len(data), max(1, len(data) // 40)):
        damaged = data[:at] + bytes([data[at] ^ 0x20]) + data[at + 1 :]
        with pytest.raises(BadTlog):
            await imported(durable_store, damaged, LocalBlobStore(tmp_path / "b"))
    assert await durable_store.runs.list() == []


async def test_a_corrupt_record_is_refused_naming_its_run_and_seq(durable_store: Store) -> None:
    out = FrameWriter()
    run = {"run_id": "bad", "agent": "a", "status": "queued", "records": 2}
    good = await exported_first_record()
    frames = [
        out.start(),
        out.json_frame(HEADER, {"format": 1, "run_id": "bad", "runs": ["bad"], "blobs": False}),
        out.json_frame(RUN, run),
        out.frame(RECORD, good),
        out.frame(RECORD, b"\x0a\x05junk!"),
        out.end({"runs": 1, "records": 2, "blobs": 0}),
    ]
    await _refused(durable_store, b"".join(frames), "run bad: record at seq 1 is not a valid")


async def exported_first_record() -> bytes:
    async with store_from_url("memory:") as store:
        run_id = await Runtime(store).submit(chain, {"i": 0, "n": 2}, run_id="bad")
        return (await store.log.read_all(run_id))[0]


async def test_a_record_that_does_not_replay_is_refused(durable_store: Store) -> None:
    async with store_from_url("memory:") as store:
        outcome = await Runtime(store).start(chain, {"i": 0, "n": 3}, run_id="gap")
        rows = await store.log.read_all(outcome.run_id)
    out = FrameWriter()
    kept = [rows[0], rows[2]]  # seq 1 left out: seq 2 completes a node never spawned
    frames = [
        out.start(),
        out.json_frame(HEADER, {"format": 1, "run_id": "gap", "runs": ["gap"], "blobs": False}),
        out.json_frame(
            RUN, {"run_id": "gap", "agent": chain.name, "status": "queued", "records": 2}
        ),
        *(out.frame(RECORD, r) for r in kept),
        out.end({"runs": 1, "records": 2, "blobs": 0}),
    ]
    await _refused(durable_store, b"".join(frames), "run gap: record at seq 1 does not replay")


async def test_a_file_that_goes_on_after_its_end_is_refused(
    durable_store: Store, tmp_path: Path
) -> None:
    data, _ = await _sample(tmp_path)
    await _refused(durable_store, data + b"more", "bytes follow its end frame")
    await _refused(durable_store, b"PK\x03\x04" + data, "not a tether run file")
    assert END and BLOB  # every frame kind is exercised by the sample


async def test_invariant_12_create_runs_writes_every_run_or_none(store: Store) -> None:
    taken = await Runtime(store).submit(chain, {"i": 0, "n": 2}, run_id=uid("taken"))
    first = (await store.log.read_all(taken))[0]
    fresh = uid("fresh")
    runs = [
        NewRun(RunInfo(fresh, chain.name, Status.QUEUED), first, entries=[(1, first)]),
        NewRun(RunInfo(taken, chain.name, Status.QUEUED), first),
    ]
    with pytest.raises(RunExists):
        await store.forks.create_runs(runs)
    assert await store.runs.get(fresh) is None
    assert await store.log.read_all(fresh) == []
    await store.forks.create_runs(runs[:1])
    assert await store.log.read_all(fresh) == [first, first]


async def test_a_run_that_went_on_after_its_import_is_the_same_run(
    two_stores: tuple[Store, Store],
) -> None:
    source, target = two_stores
    paused = await Runtime(source).start(
        chain, {"i": 0, "n": 6}, run_id=uid("went-on"), budget=Budget(max_nodes=2)
    )
    data = await exported(source, paused.run_id)
    assert await imported(target, data) == [paused.run_id]
    await Runtime(target).resume(paused.run_id, budget=Budget(max_nodes=20))
    longer = await target.log.read_all(paused.run_id)
    assert await imported(target, data) == []  # its records start with the file's
    assert await target.log.read_all(paused.run_id) == longer


async def test_a_parked_run_is_imported_queued_parks_again_and_takes_its_event(
    two_stores: tuple[Store, Store],
) -> None:
    source, target = two_stores
    parked = await Runtime(source).start(approvals, {"n": 1}, run_id=uid("parked"))
    assert parked.status is Status.WAITING
    assert await imported(target, await exported(source, parked.run_id)) == [parked.run_id]
    info = await target.runs.get(parked.run_id)
    assert info is not None and info.status is Status.QUEUED  # a worker parks it again
    rt = Runtime(target)
    again = await rt.resume(parked.run_id)
    assert (again.status, again.reason) == (Status.WAITING, "waiting for approve-0")
    await rt.signal(parked.run_id, "approve-0", {"approve": True})
    done = await rt.resume(parked.run_id)
    assert done.status is Status.SUCCEEDED


@pytest.mark.parametrize(
    ("root", "child", "says"),
    [
        ("../etc", None, "run id '../etc': use letters"),
        ("ok", "elsewhere", "run id 'elsewhere': not named as a sub-agent run of 'ok'"),
        ("ok", "ok.n1", "run ok.n1: its run frame and its first record name other parents"),
    ],
)
async def test_run_ids_a_caller_could_not_give_are_refused(
    durable_store: Store, root: str, child: str | None, says: str
) -> None:
    first = await exported_first_record()  # a top-level run's seq 0
    runs = [root] + ([child] if child else [])
    out = FrameWriter()
    frames = [out.start(), out.json_frame(HEADER, {"run_id": root, "runs": runs, "blobs": False})]
    for run_id in runs:
        parent = root if run_id != root else None
        body = {"run_id": run_id, "agent": chain.name, "status": "queued", "records": 1}
        frames += [out.json_frame(RUN, {**body, "parent_run_id": parent}), out.frame(RECORD, first)]
    frames.append(out.end({"runs": len(runs), "records": len(runs), "blobs": 0}))
    await _refused(durable_store, b"".join(frames), says)


async def test_a_fork_with_a_forked_sub_agent_run_is_exported_whole(
    two_stores: tuple[Store, Store],
) -> None:
    source, target = two_stores
    runtime = Runtime(source)
    done = await runtime.start(family, {"n": 2, "gate": None}, run_id=uid("famfork"))
    last = len(await source.log.read_all(done.run_id)) - 2  # before its run_finished
    fork_id = await runtime.fork(done.run_id, at_seq=last)
    runs = await family_of(source, fork_id)
    assert len(runs) == 2  # the fork and its forked (referenced) sub-agent run
    assert all([await source.forks.segments(r) for r in runs])

    assert sorted(await imported(target, await exported(source, fork_id))) == sorted(runs)
    assert await family_of(target, fork_id) == runs
    assert await target.runs.get(done.run_id) is None
    outcome = await Runtime(target).resume(fork_id)
    assert (outcome.status, outcome.result) == (Status.SUCCEEDED, done.result)


@pytest.mark.parametrize("seed", range(8))
async def test_random_runs_with_sub_agent_runs_round_trip_byte_for_byte(
    seed: int, tmp_path: Path
) -> None:
    async with (
        store_from_url("memory:") as source,
        store_from_url(f"sqlite:///{tmp_path / 'target.db'}") as target,
    ):
        outcome = await Runtime(source).start(
            randomgraph, {"seed": seed * 7919, "depth": 0}, run_id=uid("rnd")
        )
        runs = await family_of(source, outcome.run_id)
        data = await exported(source, outcome.run_id)
        assert sorted(await imported(target, data)) == sorted(runs)
        assert await family_of(target, outcome.run_id) == runs
        assert await exported(target, outcome.run_id) != b""
        assert await imported(target, data) == []
        loaded = await Runtime(target).load(outcome.run_id)
        assert loaded.status is outcome.status
