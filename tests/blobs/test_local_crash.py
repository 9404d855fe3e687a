"""A local put that dies midway never leaves a partial blob under its final name."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tether.blobs import LocalBlobStore

SRC = str(Path(__file__).resolve().parents[2] / "src")


def blob_files(root: Path) -> list[Path]:
    """Files anywhere under the root except the temp directory."""
    return [p for p in root.rglob("*") if p.is_file() and ".tmp" not in p.parts]


async def test_cancelled_put_removes_its_temp_file(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    started = asyncio.Event()

    async def stalls() -> AsyncIterator[bytes]:
        yield os.urandom(2 * 1024 * 1024)
        started.set()
        await asyncio.Event().wait()
        yield b"never"

    task = asyncio.create_task(store.put(stalls()))
    await started.wait()
    # The first MiB batches were written to a temp file before the stream stalled.
    assert any((tmp_path / ".tmp").iterdir())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert list((tmp_path / ".tmp").iterdir()) == []
    assert blob_files(tmp_path) == []


async def test_killed_writer_leaves_only_a_temp_file(tmp_path: Path) -> None:
    child = textwrap.dedent(
        f"""
        import asyncio, os, sys
        from tether.blobs import LocalBlobStore

        async def stalls():
            yield b"x" * (3 * 1024 * 1024)
            yield b"y" * (3 * 1024 * 1024)
            print("written", flush=True)
            await asyncio.Event().wait()
            yield b""

        asyncio.run(LocalBlobStore({str(tmp_path)!r}).put(stalls()))
        """
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        child,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": SRC},
    )
    assert proc.stdout is not None
    # The child says when it has written, then it dies the hardest way there is.
    assert await asyncio.wait_for(proc.stdout.readline(), 30) == b"written\n"
    proc.send_signal(signal.SIGKILL)
    assert await asyncio.wait_for(proc.wait(), 10) == -signal.SIGKILL

    store = LocalBlobStore(tmp_path)
    assert blob_files(tmp_path) == []
    assert [info async for info in store.list()] == []
    (temp,) = (tmp_path / ".tmp").iterdir()
    assert temp.suffix == ".part"

    # A fresh temp survives the sweep (its writer may still be alive); an old one goes.
    assert await store.remove_stale_temps(older_than=3600) == 0
    old = time.time() - 7200
    os.utime(temp, (old, old))
    assert await store.remove_stale_temps(older_than=3600) == 1
    assert list((tmp_path / ".tmp").iterdir()) == []

    # The same bytes can be stored afterwards, complete.
    data = b"x" * (3 * 1024 * 1024) + b"y" * (3 * 1024 * 1024)
    ref = await store.put(data)
    assert await store.get(ref) == data


async def test_blob_files_are_complete_and_read_only_by_name(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "a" / ".." / "b")
    ref = await store.put(b"durable")
    assert store.root == (tmp_path / "b").resolve()
    assert store.path_for(ref.sha256).read_bytes() == b"durable"
    assert ref.url == store.path_for(ref.sha256).as_uri()
