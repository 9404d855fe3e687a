"""The blob store interface: content-addressed bytes, refs that are checked before use."""

from __future__ import annotations

import asyncio
import hashlib
import re
from abc import ABC, abstractmethod
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import NamedTuple, Self

from tether.blobs.errors import BlobCorrupt, BlobRefRefused
from tether.foundation import metrics

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")

# Hashing more than this inline would stall the event loop for milliseconds.
_HASH_INLINE_LIMIT = 1 << 20


@dataclass(frozen=True, slots=True)
class BlobRef:
    """What a record keeps about a blob: where it is, how big, its hash and media type."""

    url: str
    size: int
    sha256: str
    media_type: str


class BlobInfo(NamedTuple):
    """One stored blob as listed by `BlobStore.list` (for garbage collection)."""

    sha256: str
    size: int
    mtime: float


def is_sha256_hex(key: str) -> bool:
    """Whether `key` is a lowercase 64-hex sha256, the only key a store accepts."""
    return _SHA256_HEX.fullmatch(key) is not None


def check_sha256(key: str) -> str:
    """Return `key` if it is a lowercase 64-hex sha256, else raise `BlobRefRefused`."""
    if not is_sha256_hex(key):
        raise BlobRefRefused(f"blob key {key!r} refused: keys are lowercase 64-hex sha256 digests")
    return key


def fanout(sha256: str) -> str:
    """The store-relative path of a blob: `ab/cd/<sha256>` keeps directories small."""
    return f"{sha256[:2]}/{sha256[2:4]}/{sha256}"


async def sha256_of(data: bytes) -> str:
    """Hash bytes, off the event loop when they are large."""
    if len(data) <= _HASH_INLINE_LIMIT:
        return hashlib.sha256(data).hexdigest()
    return await asyncio.to_thread(lambda: hashlib.sha256(data).hexdigest())


class BlobReader:
    """Async iterator (and async context manager) over a blob's chunks, verified at the end.

    Raises `BlobCorrupt` as soon as more bytes than `ref.size` arrive, and at the end of
    the stream if the size or sha256 differ from the ref. Chunks yielded before a
    `BlobCorrupt` must be discarded by the caller.
    """

    def __init__(self, ref: BlobRef, chunks: AsyncIterator[bytes]) -> None:
        self._ref = ref
        self._chunks = chunks
        self._hash = hashlib.sha256()
        self._read = 0

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk = await anext(self._chunks)
        except StopAsyncIteration:
            self._verify_end()
            raise
        self._read += len(chunk)
        if (m := metrics.active) is not None:
            m.blob_read.inc(len(chunk))
        if self._read > self._ref.size:
            await self.aclose()
            raise BlobCorrupt(
                f"blob {self._ref.url}: stored object is longer than the ref's "
                f"{self._ref.size} bytes (read {self._read} so far); the object was "
                "replaced or damaged; delete it and put it again from its source"
            )
        self._hash.update(chunk)
        return chunk

    async def aclose(self) -> None:
        """Release the underlying file or connection."""
        aclose = getattr(self._chunks, "aclose", None)
        if aclose is not None:
            await aclose()

    def _verify_end(self) -> None:
        ref = self._ref
        if self._read != ref.size:
            raise BlobCorrupt(
                f"blob {ref.url}: truncated, read {self._read} of {ref.size} bytes; "
                "the stored object is damaged; put it again from its source"
            )
        actual = self._hash.hexdigest()
        if actual != ref.sha256:
            raise BlobCorrupt(
                f"blob {ref.url}: sha256 mismatch, stored bytes hash to {actual}; "
                "the stored object is damaged; delete it and put it again from its source"
            )


class BlobStore(ABC):
    """Content-addressed bytes: the key is the sha256 hex, the same bytes are stored once.

    Every url is checked against this store's root before use (`resolve`): a ref that
    points anywhere else is refused with `BlobRefRefused` and never fetched.
    """

    @property
    @abstractmethod
    def root_url(self) -> str:
        """The url every blob url of this store starts with (no trailing slash)."""

    def url_for(self, sha256: str) -> str:
        """The canonical url of the blob with this sha256."""
        return f"{self.root_url}/{fanout(check_sha256(sha256))}"

    def resolve(self, url: str) -> str:
        """Return the sha256 a url names, or raise `BlobRefRefused` if it is not ours.

        The url must equal the canonical url built from its own last segment, so any
        other scheme, host, bucket, prefix, percent-encoding or `..` segment is refused.
        """
        sha256 = url.rpartition("/")[2]
        if not is_sha256_hex(sha256) or url != self.url_for(sha256):
            raise BlobRefRefused(
                f"blob url {url!r} refused: it is not a blob of the store at {self.root_url}"
            )
        return sha256

    def _check_ref(self, ref: BlobRef) -> str:
        sha256 = self.resolve(ref.url)
        if ref.sha256 != sha256:
            raise BlobRefRefused(
                f"blob ref {ref.url} refused: its sha256 field {ref.sha256!r} differs from its url"
            )
        return sha256

    async def put(
        self,
        data: bytes | AsyncIterable[bytes],
        media_type: str = "application/octet-stream",
    ) -> BlobRef:
        """Store bytes (or a stream of chunks, never held whole) and return their ref."""
        if isinstance(data, bytes | bytearray | memoryview):
            raw = bytes(data)
            sha256 = await sha256_of(raw)
            # A stored copy of the wrong size is damaged: writing it again repairs it.
            # A copy that vanished before it could be touched (gc) is written again too.
            if await self._stored_size(sha256) != len(raw) or not await self._touch(sha256):
                await self._put_bytes(sha256, raw)
            size = len(raw)
        else:
            sha256, size = await self._put_stream(data)
        if (m := metrics.active) is not None:
            m.blob_written.inc(size)
        return BlobRef(url=self.url_for(sha256), size=size, sha256=sha256, media_type=media_type)

    async def get(self, ref: BlobRef) -> bytes:
        """Read a whole blob, verified against the ref's size and sha256."""
        parts = []
        async with self.open(ref) as chunks:
            async for chunk in chunks:
                parts.append(chunk)
        return b"".join(parts)

    def open(self, ref: BlobRef) -> BlobReader:
        """Stream a blob's chunks; raises `BlobCorrupt` at the end if they do not match."""
        sha256 = self._check_ref(ref)
        return BlobReader(ref, self._read_chunks(sha256))

    async def exists(self, ref_or_sha256: BlobRef | str) -> bool:
        """Whether the blob is stored (a ref's url is checked first)."""
        if isinstance(ref_or_sha256, BlobRef):
            sha256 = self._check_ref(ref_or_sha256)
        else:
            sha256 = check_sha256(ref_or_sha256)
        return await self._stored_size(sha256) is not None

    async def delete(self, sha256: str) -> None:
        """Remove a blob; deleting a missing blob is a no-op."""
        await self._delete(check_sha256(sha256))

    @abstractmethod
    def list(self) -> AsyncIterator[BlobInfo]:
        """Every stored blob as `(sha256, size, mtime)`, in no particular order."""

    @abstractmethod
    async def close(self) -> None:
        """Release clients and connections."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @abstractmethod
    async def _stored_size(self, sha256: str) -> int | None:
        """Size of the stored blob, or None if it is missing."""

    @abstractmethod
    async def _put_bytes(self, sha256: str, data: bytes) -> None: ...

    async def _overwrite(self, sha256: str, data: bytes) -> None:
        """Replace a stored blob's bytes atomically (re-sealing under a new key).

        Object stores overwrite on put; a store that skips existing blobs overrides this.
        """
        await self._put_bytes(sha256, data)

    async def _touch(self, sha256: str) -> bool:
        """Mark an already stored blob as just put; False if it is gone.

        gc spares blobs younger than its grace period; a re-put of an old orphan (the same
        bytes) is about to be referenced again, so it must look young. S3 cannot change an
        object's Last-Modified without rewriting it, so there this is a no-op.
        """
        return True

    @abstractmethod
    async def _put_stream(self, chunks: AsyncIterable[bytes]) -> tuple[str, int]:
        """Store a stream whose hash is known only at its end; return (sha256, size)."""

    @abstractmethod
    def _read_chunks(self, sha256: str) -> AsyncIterator[bytes]:
        """Yield the stored chunks; raise `BlobNotFound` on the first step if missing."""

    @abstractmethod
    async def _delete(self, sha256: str) -> None: ...
