"""One test body per behaviour, run against the local and the S3 backend."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import AsyncIterator

import pytest

from tether.blobs import BlobCorrupt, BlobInfo, BlobNotFound, BlobRef
from tether.blobs.base import fanout

from .conftest import Backend


async def chunked(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


async def collect(backend: Backend) -> list[BlobInfo]:
    return [info async for info in backend.store.list()]


@pytest.mark.parametrize("size", [0, 1, 4096, 3 * 1024 * 1024 + 17])
async def test_round_trip_bytes_and_stream(backend: Backend, size: int) -> None:
    data = os.urandom(size)
    sha = hashlib.sha256(data).hexdigest()
    ref = await backend.store.put(data, "text/plain")
    assert ref == BlobRef(backend.store.url_for(sha), size, sha, "text/plain")
    assert ref.url.startswith(backend.store.root_url + "/")
    assert await backend.store.get(ref) == data
    async with backend.store.open(ref) as chunks:
        assert b"".join([c async for c in chunks]) == data

    streamed = await backend.store.put(chunked(data, 64 * 1024))
    assert streamed == BlobRef(ref.url, size, sha, "application/octet-stream")
    assert await backend.store.get(streamed) == data


async def test_same_bytes_stored_once(backend: Backend) -> None:
    data = os.urandom(10_000)
    first = await backend.store.put(data)
    second = await backend.store.put(data, "image/png")
    third = await backend.store.put(chunked(data, 999))
    assert first.url == second.url == third.url
    assert second.media_type == "image/png"
    # Exactly one stored file/object and no temp left behind by the streamed put.
    assert backend.raw.keys() == [fanout(first.sha256)]
    assert [(i.sha256, i.size) for i in await collect(backend)] == [(first.sha256, 10_000)]


async def test_exists_and_delete(backend: Backend) -> None:
    ref = await backend.store.put(b"hello")
    assert await backend.store.exists(ref)
    assert await backend.store.exists(ref.sha256)
    await backend.store.delete(ref.sha256)
    assert not await backend.store.exists(ref)
    assert not await backend.store.exists(ref.sha256)
    await backend.store.delete(ref.sha256)  # deleting a missing blob is a no-op
    assert backend.raw.keys() == []


async def test_list_reports_every_blob(backend: Backend) -> None:
    before = time.time()
    refs = [await backend.store.put(os.urandom(n)) for n in (1, 100, 70_000)]
    infos = await collect(backend)
    assert sorted((i.sha256, i.size) for i in infos) == sorted((r.sha256, r.size) for r in refs)
    # S3 timestamps have one-second resolution, hence the slack.
    assert all(before - 2 <= i.mtime <= time.time() + 2 for i in infos)


async def test_list_of_empty_store(backend: Backend) -> None:
    assert await collect(backend) == []


async def test_changed_bytes_raise_corrupt(backend: Backend) -> None:
    data = b"the original bytes"
    ref = await backend.store.put(data)
    backend.raw.write(ref.sha256, b"THE original bytes")
    with pytest.raises(BlobCorrupt, match="sha256 mismatch") as info:
        await backend.store.get(ref)
    assert ref.url in str(info.value)
    assert hashlib.sha256(b"THE original bytes").hexdigest() in str(info.value)
    with pytest.raises(BlobCorrupt, match="sha256 mismatch"):
        async with backend.store.open(ref) as chunks:
            async for _ in chunks:
                pass


async def test_truncated_blob_raises_corrupt(backend: Backend) -> None:
    ref = await backend.store.put(os.urandom(5000))
    backend.raw.write(ref.sha256, os.urandom(1200))
    with pytest.raises(BlobCorrupt, match=r"truncated, read 1200 of 5000 bytes") as info:
        await backend.store.get(ref)
    assert ref.url in str(info.value)


async def test_longer_blob_raises_corrupt_without_reading_it_all(backend: Backend) -> None:
    ref = await backend.store.put(b"short")
    backend.raw.write(ref.sha256, b"short" + b"x" * 3 * 1024 * 1024)
    with pytest.raises(BlobCorrupt, match="longer than the ref's 5 bytes") as info:
        async for _ in backend.store.open(ref):
            pass
    assert ref.url in str(info.value)


async def test_ref_with_wrong_size_raises_corrupt(backend: Backend) -> None:
    ref = await backend.store.put(b"abc")
    lying = BlobRef(ref.url, 2, ref.sha256, ref.media_type)
    with pytest.raises(BlobCorrupt, match="longer than the ref's 2 bytes"):
        await backend.store.get(lying)


async def test_missing_blob_raises_not_found(backend: Backend) -> None:
    ref = await backend.store.put(b"soon gone")
    backend.raw.remove(ref.sha256)
    with pytest.raises(BlobNotFound, match="not found") as info:
        await backend.store.get(ref)
    assert ref.url in str(info.value)
    with pytest.raises(BlobNotFound):
        async with backend.store.open(ref) as chunks:
            await anext(chunks)


async def test_failing_stream_leaves_nothing(backend: Backend) -> None:
    class SourceFailed(Exception):
        pass

    async def failing() -> AsyncIterator[bytes]:
        yield os.urandom(3 * 1024 * 1024)
        yield os.urandom(6 * 1024 * 1024)  # past one S3 part, so an upload has begun
        raise SourceFailed("model stream dropped")

    with pytest.raises(SourceFailed):
        await backend.store.put(failing())
    assert backend.raw.keys() == []
    assert await collect(backend) == []


@pytest.mark.parametrize("how", ["bytes", "stream"])
async def test_put_again_repairs_a_truncated_blob(backend: Backend, how: str) -> None:
    data = os.urandom(5000)
    ref = await backend.store.put(data)
    backend.raw.write(ref.sha256, data[:1000])
    with pytest.raises(BlobCorrupt, match="put it again"):
        await backend.store.get(ref)
    await backend.store.put(data if how == "bytes" else chunked(data, 700))
    assert await backend.store.get(ref) == data
    assert backend.raw.keys() == [fanout(ref.sha256)]
