"""Local directory blob store: the embedded default, beside the SQLite file.

Layout: `<root>/ab/cd/<sha256>`, urls `file:///<root>/ab/cd/<sha256>`. Writes go to a
temporary file under `<root>/.tmp/` (same filesystem, so the rename is atomic), which is
fsynced, renamed onto its final name, and the final directory fsynced: a crash leaves
either the whole blob under its name or nothing (at most a stray temp file).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from tether.blobs.base import BlobInfo, BlobStore, fanout, is_sha256_hex
from tether.blobs.errors import BlobError, BlobNotFound, BlobStoreUnavailable

CHUNK_SIZE = 1 << 20
TMP_DIR = ".tmp"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalBlobStore(BlobStore):
    """Blobs as files under one directory, written atomically and durably."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        # realpath so the url of a blob is stable however the root was spelled.
        self._root = Path(os.path.realpath(root))
        self._tmp = self._root / TMP_DIR
        try:
            self._tmp.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BlobError(
                f"blob store directory {self._root} cannot be created: {exc.strerror or exc}"
            ) from exc
        self._root_url = self._root.as_uri()

    @property
    def root(self) -> Path:
        """The directory blobs are stored under."""
        return self._root

    @property
    def root_url(self) -> str:
        return self._root_url

    def path_for(self, sha256: str) -> Path:
        """The file a blob lives in (the sha256 must already be checked)."""
        return self._root / fanout(sha256)

    async def _stored_size(self, sha256: str) -> int | None:
        return await asyncio.to_thread(_file_size, self.path_for(sha256))

    @contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        """A write's OS error (disk full, read-only, permissions) as BlobStoreUnavailable.

        The executor pauses a run on a BlobError (the node stays unrecorded, nothing is
        lost) where a bare OSError would fail the node: the disk is the deployment's
        problem, not the node's, and the run resumes once it is fixed.
        """
        try:
            yield
        except OSError as exc:
            raise BlobStoreUnavailable(
                f"blob store {self._root}: writing {what} failed: {exc}"
            ) from exc

    async def _put_bytes(self, sha256: str, data: bytes) -> None:
        with self._writing(f"blob {sha256}"):
            await asyncio.to_thread(self._write_whole, sha256, data)

    async def _overwrite(self, sha256: str, data: bytes) -> None:
        with self._writing(f"blob {sha256}"):
            await asyncio.to_thread(self._write_whole, sha256, data, True)

    def _write_whole(self, sha256: str, data: bytes, replace: bool = False) -> None:
        tmp, f = self._open_tmp()
        try:
            with f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            self._publish(tmp, sha256, len(data), replace)
        finally:
            tmp.unlink(missing_ok=True)

    async def _put_stream(self, chunks: AsyncIterable[bytes]) -> tuple[str, int]:
        with self._writing("a streamed blob"):
            return await self._write_stream(chunks)

    async def _write_stream(self, chunks: AsyncIterable[bytes]) -> tuple[str, int]:
        tmp, f = await asyncio.to_thread(self._open_tmp)
        hasher = hashlib.sha256()
        size = 0
        try:
            try:
                pending: list[bytes] = []
                pending_size = 0
                async for chunk in chunks:
                    pending.append(chunk)
                    pending_size += len(chunk)
                    # Batch small chunks so each thread hop writes about a MiB.
                    if pending_size >= CHUNK_SIZE:
                        await asyncio.to_thread(_hash_and_write, f, hasher, pending)
                        size += pending_size
                        pending, pending_size = [], 0
                await asyncio.to_thread(_hash_and_write, f, hasher, pending)
                size += pending_size
                await asyncio.to_thread(_flush_and_sync, f)
            finally:
                await asyncio.to_thread(f.close)
            sha256 = hasher.hexdigest()
            await asyncio.to_thread(self._publish, tmp, sha256, size)
        finally:
            # Also runs when the source raises or the task is cancelled midway.
            await asyncio.to_thread(tmp.unlink, True)
        return sha256, size

    def _open_tmp(self) -> tuple[Path, BinaryIO]:
        tmp = self._tmp / f"{uuid.uuid4().hex}.part"
        return tmp, tmp.open("xb")

    def _publish(self, tmp: Path, sha256: str, size: int, replace: bool = False) -> None:
        """Rename a synced temp file onto the blob's name, unless the blob is already there
        (or `replace`: a re-sealed blob takes the place of its old form atomically)."""
        final = self.path_for(sha256)
        # A stored copy of the wrong size is damaged and gets replaced.
        if not replace and _file_size(final) == size and _touch(final):
            return
        parent = final.parent
        if not parent.is_dir():
            parent.mkdir(parents=True, exist_ok=True)
            # The new fan-out directories must survive a crash too.
            _fsync_dir(parent.parent)
            _fsync_dir(self._root)
        os.replace(tmp, final)
        _fsync_dir(parent)

    async def _read_chunks(self, sha256: str) -> AsyncIterator[bytes]:
        path = self.path_for(sha256)
        try:
            f = await asyncio.to_thread(path.open, "rb")
        except FileNotFoundError:
            raise BlobNotFound(f"blob {self.url_for(sha256)} not found in {self._root}") from None
        try:
            while chunk := await asyncio.to_thread(f.read, CHUNK_SIZE):
                yield chunk
        finally:
            await asyncio.to_thread(f.close)

    async def _touch(self, sha256: str) -> bool:
        with self._writing(f"blob {sha256}"):
            return await asyncio.to_thread(_touch, self.path_for(sha256))

    async def _delete(self, sha256: str) -> None:
        await asyncio.to_thread(self.path_for(sha256).unlink, True)

    async def remove_stale_temps(self, older_than: float = 3600.0) -> int:
        """Delete temp files left by crashed writers; return how many were removed.

        Only files older than `older_than` seconds go, since another process sharing the
        directory may be writing a fresh one right now.
        """
        return await asyncio.to_thread(_remove_old_files, self._tmp, time.time() - older_than)

    async def close(self) -> None:
        """Nothing to release: every file is closed when its call returns."""

    async def list(self) -> AsyncIterator[BlobInfo]:
        for first in await asyncio.to_thread(_subdirs, self._root):
            for second in await asyncio.to_thread(_subdirs, first):
                for info in await asyncio.to_thread(_blobs_in, second):
                    yield info


def _file_size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def _touch(path: Path) -> bool:
    """Set mtime (gc's idea of age) to now; False if the file is gone."""
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    return True


def _hash_and_write(f: BinaryIO, hasher: hashlib._Hash, chunks: list[bytes]) -> None:
    for chunk in chunks:
        hasher.update(chunk)
        f.write(chunk)


def _flush_and_sync(f: BinaryIO) -> None:
    f.flush()
    os.fsync(f.fileno())


def _remove_old_files(directory: Path, cutoff: float) -> int:
    removed = 0
    with os.scandir(directory) as it:
        for e in it:
            if e.is_file() and e.stat().st_mtime < cutoff:
                Path(e.path).unlink(missing_ok=True)
                removed += 1
    return removed


def _subdirs(path: Path) -> list[Path]:
    """Fan-out directories only (two lowercase hex chars), so `.tmp` is never listed."""
    with os.scandir(path) as it:
        return [
            Path(e.path)
            for e in it
            if len(e.name) == 2 and all(c in "0123456789abcdef" for c in e.name) and e.is_dir()
        ]


def _blobs_in(path: Path) -> list[BlobInfo]:
    infos = []
    with os.scandir(path) as it:
        for e in it:
            if is_sha256_hex(e.name) and e.is_file():
                st = e.stat()
                infos.append(BlobInfo(e.name, st.st_size, st.st_mtime))
    return infos
