"""Issue 39, imports and agents, against a real `tether serve`: it executes only the agents
it was started with, whatever a `.tlog` import or the store names, and never imports the
module of any other (importing it runs its code in the server process)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.server.agents import chain_input
from tests.server.kit import CHAIN, TOKEN, ServerProcess, start_server
from tether import Runtime, export_run, store_from_url
from tether.client import ApiError, TetherClient
from tether.model.records import decode_log, encode
from tether.ops.tlog.format import END, RECORD, RUN, FrameWriter, read_frames

from .test_api import wait_status

UNSERVED = "tests.server.unserved:agent"


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "unserved.log"


@pytest.fixture
def server(tmp_path: Path, marker: Path) -> Iterator[ServerProcess]:
    db = f"sqlite:///{tmp_path / 'tether.db'}"
    proc = start_server(tmp_path, db, env={"TETHER_TEST_UNSERVED": str(marker)})
    try:
        yield proc
    finally:
        proc.stop()


async def queued_tlog() -> tuple[str, bytes]:
    """A queued run of CHAIN (nobody executed it) exported as a `.tlog` file."""
    async with store_from_url("memory:") as source:
        graph = await Runtime(source).create(CHAIN, chain_input(2, 1, 0))
        return graph.run_id, b"".join([c async for c in export_run(source, graph.run_id)])


async def rewritten(data: bytes, *, row: str | None, record: str | None) -> bytes:
    """The file with its runs' row agent and/or run_started agent replaced (a valid file:
    its end frame rehashed)."""

    async def chunks() -> AsyncIterator[bytes]:
        yield data

    out = FrameWriter()
    parts = [out.start()]
    run_id = ""
    async for frame in read_frames("probe", chunks()):
        payload = frame.payload
        if frame.kind == RUN:
            value = frame.json("probe")
            run_id = value["run_id"]
            if row is not None:
                value["agent"] = row
            parts.append(out.json_frame(RUN, value))
            continue
        if frame.kind == RECORD and record is not None:
            (decoded,) = decode_log(run_id, [payload])
            if decoded.WhichOneof("body") == "run_started":
                decoded.run_started.agent = record
                payload = encode(decoded)
        if frame.kind == END:
            counts = {k: v for k, v in frame.json("probe").items() if k != "sha256"}
            parts.append(out.end(counts))
            continue
        parts.append(out.frame(frame.kind, payload))
    return b"".join(parts)


async def test_an_import_naming_an_agent_not_served_is_refused_whole(
    server: ServerProcess, marker: Path
) -> None:
    run_id, data = await queued_tlog()
    probe = await rewritten(data, row=UNSERVED, record=UNSERVED)
    async with TetherClient(server.url, TOKEN) as client:
        with pytest.raises(ApiError) as refused:
            await client.import_tlog(probe)
        assert (refused.value.status, refused.value.kind) == (422, "unknown_agent")
        assert run_id in str(refused.value) and repr(UNSERVED) in str(refused.value)
        with pytest.raises(ApiError) as gone:  # nothing imported
            await client.get(run_id)
        assert gone.value.status == 404

        # A row that names a served agent over a record that names another: refused too.
        lying = await rewritten(data, row=None, record=UNSERVED)
        with pytest.raises(ApiError) as mismatch:
            await client.import_tlog(lying)
        assert (mismatch.value.status, mismatch.value.kind) == (422, "bad_tlog")
        assert run_id in str(mismatch.value) and repr(UNSERVED) in str(mismatch.value)
        with pytest.raises(ApiError) as gone:
            await client.get(run_id)
        assert gone.value.status == 404

        # The file as exported imports, and its served agent runs it.
        assert (await client.import_tlog(data))["created"] == [run_id]
        await wait_status(client, run_id, "succeeded")
    assert not await asyncio.to_thread(marker.exists)  # never imported in the server


async def test_the_embedded_worker_never_runs_an_agent_it_was_not_started_with(
    server: ServerProcess, marker: Path, tmp_path: Path
) -> None:
    # A run of another agent queued in the server's store by some other process.
    async with store_from_url(f"sqlite:///{tmp_path / 'tether.db'}") as store:
        other = await Runtime(store).submit(UNSERVED, {})
    async with TetherClient(server.url, TOKEN) as client:
        # A served run queued after it, and finished: the worker claimed and looked at
        # the runnable runs since the other run was queued.
        served = (await client.start(CHAIN, chain_input(2, 1, 0)))["run_id"]
        await wait_status(client, served, "succeeded")
        assert (await client.get(other))["status"] == "queued"
    assert not await asyncio.to_thread(marker.exists)


# -- forks and imports are starts for the caps ------------------------------------------


async def test_forks_and_imports_count_against_the_queue_cap(tmp_path: Path) -> None:
    # No workers: every run stays queued.
    server = start_server(
        tmp_path, f"sqlite:///{tmp_path / 'tether.db'}", "--workers", "external",
        "--max-queued", "2", "--starts-per-second", "0",
    )  # fmt: skip
    _, data = await queued_tlog()
    try:
        async with TetherClient(server.url, TOKEN) as client:
            imported = (await client.import_tlog(data))["run_id"]  # 1 queued
            fork = await client.fork(imported, at_seq=0)  # 2 queued
            with pytest.raises(ApiError) as forks:
                await client.fork(imported, at_seq=0)
            assert (forks.value.status, forks.value.kind) == (429, "too_many_requests")
            _, other = await queued_tlog()
            with pytest.raises(ApiError) as imports:
                await client.import_tlog(other)
            assert (imports.value.status, imports.value.kind) == (429, "too_many_requests")
            runs = {r["run_id"] for r in (await client.list())["runs"]}
            assert runs == {imported, fork["run_id"]}
    finally:
        assert server.stop() == 0


async def test_forks_and_imports_spend_the_start_rate(tmp_path: Path) -> None:
    server = start_server(
        tmp_path, f"sqlite:///{tmp_path / 'tether.db'}", "--workers", "external",
        "--starts-per-second", "0.01", "--start-burst", "2",
    )  # fmt: skip
    _, data = await queued_tlog()
    try:
        async with TetherClient(server.url, TOKEN) as client:
            imported = (await client.import_tlog(data))["run_id"]
            await client.fork(imported, at_seq=0)
            with pytest.raises(ApiError) as forks:
                await client.fork(imported, at_seq=0)
            assert (forks.value.status, forks.value.kind) == (429, "too_many_requests")
            _, other = await queued_tlog()
            with pytest.raises(ApiError) as imports:
                await client.import_tlog(other)
            assert imports.value.status == 429
            with pytest.raises(ApiError) as starts:
                await client.start(CHAIN, chain_input(1, 1, 0))
            assert starts.value.status == 429
    finally:
        assert server.stop() == 0
