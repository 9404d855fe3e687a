"""A blob store that seals every blob (AES-256-GCM) before it leaves the process.

It wraps another store (a local directory, S3) and keeps its layout and urls; only the
bytes and the address change. A blob's address is the HMAC of its plaintext under the
ring's address key instead of its bare sha256, so the same plaintext has unrelated
addresses under two rings (tenants), and equal plaintexts dedupe within one ring. A
ref's `size` is the plaintext's; what is stored is

    b"TSB1" | len(key id) (1 byte) | key id | nonce (12 bytes) | ciphertext + tag

Blobs are sealed and opened whole (a streamed put is gathered first).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import AsyncIterable, AsyncIterator

from tether.blobs.base import BlobInfo, BlobReader, BlobRef, BlobStore, check_sha256
from tether.blobs.errors import BlobCorrupt
from tether.foundation import metrics
from tether.foundation.crypto.keyring import KeyRing
from tether.foundation.crypto.runkeys import RunKeyBox, run_of_key
from tether.foundation.crypto.seal import NONCE_BYTES, address, open_sealed, seal
from tether.foundation.errors import KeyRingError

MAGIC = b"TSB1"
_AAD = b"tether blob v1"


def frame(ring: KeyRing, plaintext: bytes) -> bytes:
    """The stored form of a blob: sealed under the ring's current key."""
    key_id, nonce, ciphertext = seal(ring, plaintext, _AAD)
    kid = key_id.encode()
    return MAGIC + bytes([len(kid)]) + kid + nonce + ciphertext


def key_id_of(stored: bytes) -> str | None:
    """The key id a stored blob was sealed under; None if it is not a sealed blob."""
    if not stored.startswith(MAGIC) or len(stored) < len(MAGIC) + 1:
        return None
    n = stored[len(MAGIC)]
    return stored[len(MAGIC) + 1 : len(MAGIC) + 1 + n].decode(errors="replace")


def unframe(ring: KeyRing, url: str, stored: bytes) -> bytes:
    """The plaintext of a stored blob; BlobCorrupt if it is not one, KeyRingError if its key
    is missing or wrong."""
    key_id = key_id_of(stored)
    if key_id is None:
        raise BlobCorrupt(f"blob {url}: not a sealed blob (written without encryption?)")
    start = len(MAGIC) + 1 + len(key_id.encode())
    nonce, ciphertext = stored[start : start + NONCE_BYTES], stored[start + NONCE_BYTES :]
    try:
        return open_sealed(ring, key_id, nonce, ciphertext, _AAD)
    except KeyRingError as exc:
        raise KeyRingError(f"blob {url}: {exc}") from None


class _Plain(BlobReader):
    """A reader over an opened blob, checked against its address instead of a sha256."""

    def __init__(self, ref: BlobRef, store: SealedBlobStore) -> None:
        super().__init__(ref, self._chunks_of(ref, store))

    @staticmethod
    async def _chunks_of(ref: BlobRef, store: SealedBlobStore) -> AsyncIterator[bytes]:
        yield await store.opened(ref)

    def _verify_end(self) -> None:
        return None  # get() checked size and address already


class SealedBlobStore(BlobStore):
    """Seals what it puts and opens what it gets; everything else is the inner store's."""

    def __init__(self, inner: BlobStore, ring: KeyRing, box: RunKeyBox | None = None) -> None:
        self.inner = inner
        self._ring = ring
        # A run's view (per-run keys): blobs are sealed and addressed under its key, and
        # blobs sealed under other runs' keys are opened once their key is fetched.
        self.box = box

    @property
    def ring(self) -> KeyRing:
        return self._ring if self.box is None else self.box.ring

    def for_run(self, box: RunKeyBox) -> SealedBlobStore:
        """This store as a run with its own key (or a reader of such runs) sees it."""
        return SealedBlobStore(self.inner, self._ring, box)

    @property
    def root_url(self) -> str:
        return self.inner.root_url

    async def put(
        self,
        data: bytes | AsyncIterable[bytes],
        media_type: str = "application/octet-stream",
    ) -> BlobRef:
        if isinstance(data, bytes | bytearray | memoryview):
            raw = bytes(data)
        else:
            raw = b"".join([chunk async for chunk in data])
        addr = address(self.ring, raw)
        # Stored already (under any key of the ring): touch it for gc, as the base does.
        if await self.inner._stored_size(addr) is None or not await self.inner._touch(addr):
            await self.inner._put_bytes(addr, frame(self.ring, raw))
        if (m := metrics.active) is not None:
            m.blob_written.inc(len(raw))
        return BlobRef(url=self.url_for(addr), size=len(raw), sha256=addr, media_type=media_type)

    async def get(self, ref: BlobRef) -> bytes:
        plain = await self.opened(ref)
        if (m := metrics.active) is not None:
            m.blob_read.inc(len(plain))
        return plain

    async def opened(self, ref: BlobRef) -> bytes:
        """The plaintext of a blob, checked against its ref's size and address.

        A blob written before encryption was turned on is plain and addressed by its
        sha256: it is read as it is (and `reseal` seals it in place, same address).
        """
        addr = self._check_ref(ref)
        stored = b"".join([chunk async for chunk in self.inner._read_chunks(addr)])
        if len(stored) == ref.size and hashlib.sha256(stored).hexdigest() == addr:
            return stored  # plain, from before encryption
        key_id = key_id_of(stored)
        addresses = [self.ring.address]
        if self.box is not None and key_id is not None:
            await self.box.have(key_id)  # DataShredded if the run's key was destroyed
            addresses = [self.box.address_key_of(key_id)]
        plain = unframe(self.ring, ref.url, stored)
        if len(plain) != ref.size or addr not in (
            *(hmac.new(k, plain, hashlib.sha256).hexdigest() for k in addresses),
            hashlib.sha256(plain).hexdigest(),
        ):
            raise BlobCorrupt(
                f"blob {ref.url}: opened bytes do not match the ref (size or address); the "
                "stored object was replaced; put it again from its source"
            )
        return plain

    def open(self, ref: BlobRef) -> BlobReader:
        self._check_ref(ref)
        return _Plain(ref, self)

    def list(self) -> AsyncIterator[BlobInfo]:
        return self.inner.list()

    async def close(self) -> None:
        await self.inner.close()

    async def stored(self, sha256: str) -> bytes:
        """The stored (sealed) bytes of a blob, as they are at rest."""
        return b"".join([c async for c in self.inner._read_chunks(check_sha256(sha256))])

    async def reseal(self, sha256: str) -> bool:
        """Seal a stored blob again under the current key; False if it already is."""
        stored = await self.stored(sha256)
        kid = key_id_of(stored)
        if kid == self.ring.current or (kid is not None and run_of_key(kid) is not None):
            return False  # a run's own key does not rotate (its wrapping does)
        if hashlib.sha256(stored).hexdigest() == sha256:
            plain = stored  # plain, from before encryption: sealed now, same address
        else:
            plain = unframe(self.ring, self.url_for(sha256), stored)
        await self.inner._overwrite(sha256, frame(self.ring, plain))
        return True

    # The base class' internals, answered by the inner store (put/get above bypass them).
    async def _stored_size(self, sha256: str) -> int | None:
        return await self.inner._stored_size(sha256)

    async def _put_bytes(self, sha256: str, data: bytes) -> None:
        raise NotImplementedError("SealedBlobStore.put seals and addresses blobs itself")

    async def _put_stream(self, chunks: AsyncIterable[bytes]) -> tuple[str, int]:
        raise NotImplementedError("SealedBlobStore.put seals and addresses blobs itself")

    def _read_chunks(self, sha256: str) -> AsyncIterator[bytes]:
        return self.inner._read_chunks(sha256)

    async def _delete(self, sha256: str) -> None:
        await self.inner._delete(sha256)
