"""Turning handler values into record Values and back: large ones live in the blob store."""

from __future__ import annotations

from typing import Any

from tether.blobs import BlobError, BlobRef, BlobStore
from tether.foundation.crypto.keyring import KeyRing
from tether.foundation.crypto.runkeys import DataShredded, RunKeyBox
from tether.foundation.crypto.seal import open_sealed, seal
from tether.foundation.errors import KeyRingError
from tether.model.records import BlobRefPb, Sealed, Value, dump_json, load_json

# What a sealed Value's ciphertext is bound to (AES-GCM associated data).
_VALUE_AAD = b"tether value v1"

# Values whose JSON is larger than this go to the blob store; the record keeps the ref.
DEFAULT_OFFLOAD_THRESHOLD = 4 * 1024
# What `Codec.decode_now` says of a value it cannot give at once (no JSON value is this).
LATER: Any = object()
JSON_MEDIA_TYPE = "application/json"


def ref_of(pb: BlobRefPb) -> BlobRef:
    """The BlobRef a record's BlobRef message describes."""
    return BlobRef(url=pb.url, size=pb.size, sha256=pb.sha256, media_type=pb.media_type)


def pb_of(ref: BlobRef) -> BlobRefPb:
    """The record message for a BlobRef."""
    return BlobRefPb(url=ref.url, size=ref.size, sha256=ref.sha256, media_type=ref.media_type)


class ValueCodec:
    """Encodes values as inline JSON, or as a blob ref when large; decodes and caches by key.

    A blob is durable when `encode` returns (the store's put is), so a record built from
    the Value never points to bytes that a crash could lose.
    """

    def __init__(
        self,
        blobs: BlobStore | None = None,
        *,
        threshold: int = DEFAULT_OFFLOAD_THRESHOLD,
        keys: KeyRing | None = None,
        box: RunKeyBox | None = None,
    ) -> None:
        self.blobs = blobs
        self.threshold = threshold
        # With a ring, inline JSON is sealed (and `blobs` is expected to seal too).
        self._keys = keys
        # Per-run keys: the ring plus the run keys fetched so far, and the run whose key
        # seals what this codec encodes once bound (`Runtime.codec_for`).
        self.box = box
        self._cache: dict[str, Any] = {}

    async def encode(self, obj: Any) -> Value:
        value = self.encode_now(obj)
        return value if isinstance(value, Value) else await self.offload(value)

    def encode_now(self, obj: Any) -> Value | bytes:
        """The Value of `obj` if it is kept inline; else its JSON, for `offload`."""
        data = dump_json(obj)
        # Without a blob store a large value stays inline and the record cap reports it.
        if self.blobs is None or len(data) <= self.threshold:
            if self.keys is not None:
                return Value(sealed=self._seal(data))
            return Value(json=data)
        return data

    def encode_into(self, field: Value, obj: Any) -> bytes | None:
        """Set a record's Value `field` to `obj` in place if it is kept inline (absent for
        JSON null, as `set_value` leaves it) and return None; else return its JSON, for
        `offload`. The executor's hot path: no Value built and copied into the record."""
        data = dump_json(obj)
        if self.blobs is None or len(data) <= self.threshold:
            if self.keys is not None:
                field.sealed.CopyFrom(self._seal(data))
            elif data != b"null":
                field.json = data
            return None
        return data

    @property
    def keys(self) -> KeyRing | None:
        return self._keys if self.box is None else self.box.ring

    def _seal(self, data: bytes) -> Sealed:
        assert self.keys is not None
        key_id, nonce, ciphertext = seal(self.keys, data, _VALUE_AAD)
        return Sealed(key_id=key_id, nonce=nonce, ciphertext=ciphertext)

    async def offload(self, data: bytes) -> Value:
        """A Value pointing to `data` (a value's JSON) stored in the blob store."""
        assert self.blobs is not None
        ref = await self.blobs.put(data, JSON_MEDIA_TYPE)
        return Value(blob=pb_of(ref))

    async def decode(self, value: Value) -> Any:
        kind = value.WhichOneof("kind")
        if kind == "json":
            return load_json(value.json)
        if kind is None:
            return None
        return await self._decode_other(kind, value)

    def decode_now(self, value: Value) -> Any:
        """The value if it is inline JSON (or unset); `LATER` if it needs `decode` (sealed
        or in the blob store). No tuple: it runs for every node."""
        if data := value.json:  # inline JSON, never empty: one field read, no oneof lookup
            return load_json(data)
        kind = value.WhichOneof("kind")
        if kind == "json":  # (set, but empty: not JSON, which load_json says)
            return load_json(data)
        return None if kind is None else LATER

    async def _decode_other(self, kind: str, value: Value) -> Any:
        if kind == "sealed":
            sealed = value.sealed
            if self.keys is None:
                raise KeyRingError(
                    f"value sealed under key id {sealed.key_id!r}, but no key ring is "
                    "configured: set TETHER_KEYS to the ring the run was written with"
                )
            if self.box is not None:
                try:
                    await self.box.have(sealed.key_id)
                except DataShredded as gone:  # shown as such, never an error that stops
                    return gone.marker()
            return load_json(
                open_sealed(self.keys, sealed.key_id, sealed.nonce, sealed.ciphertext, _VALUE_AAD)
            )
        if kind == "blob":
            ref = ref_of(value.blob)
            if self.blobs is None:
                raise BlobError(
                    f"value is stored in blob {ref.url}, but no blob store is configured: "
                    "pass Runtime(blobs=...), or set TETHER_BLOB_URL / --blobs to the store "
                    "the run was written with"
                )
            # get() resolves the url against this store first: a foreign ref is refused
            # before anything is fetched, and the bytes are checked against size and sha256.
            try:
                return load_json(await self.blobs.get(ref))
            except DataShredded as gone:
                return gone.marker()
        raise ValueError(f"value kind {kind!r} is not known to this version of tether")

    async def decode_cached(self, key: str, value: Value) -> Any:
        """Decode once per key (node outputs are read by every descendant that asks)."""
        try:
            return self._cache[key]
        except KeyError:
            decoded = self._cache[key] = await self.decode(value)
            return decoded
