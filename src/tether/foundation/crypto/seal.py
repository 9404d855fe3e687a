"""AES-256-GCM with a synthetic nonce: the same plaintext under the same key seals to the
same bytes (a retried put or append is byte-identical and deduplicates), and nothing
else repeats a nonce. It shows that two sealed values are equal only under one key."""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING

from tether.foundation.crypto.keyring import KeyRing
from tether.foundation.errors import KeyRingError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

NONCE_BYTES = 12


def _aead(key: bytes) -> AESGCM:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:  # the extra is not installed
        raise KeyRingError("encryption needs `pip install 'tether[encryption]'`") from exc
    return AESGCM(key)


def _keyed(ring: KeyRing, key_id: str) -> tuple[AESGCM, bytes]:
    """The cipher and the nonce key of a key of the ring (made once per ring and key)."""
    found = ring.cache.get(key_id)
    if found is None:
        key = ring.key(key_id)
        nonce_key = hmac.new(key, b"tether nonce v1", hashlib.sha256).digest()
        found = ring.cache[key_id] = (_aead(key), nonce_key)
    return found


def seal(ring: KeyRing, plaintext: bytes, aad: bytes) -> tuple[str, bytes, bytes]:
    """(key id, nonce, ciphertext) of `plaintext` under the ring's current key."""
    aead, nonce_key = _keyed(ring, ring.current)
    nonce = hmac.digest(nonce_key, aad + b"\0" + plaintext, "sha256")[:NONCE_BYTES]
    return ring.current, nonce, aead.encrypt(nonce, plaintext, aad)


def open_sealed(ring: KeyRing, key_id: str, nonce: bytes, ciphertext: bytes, aad: bytes) -> bytes:
    """The plaintext; KeyRingError if the key id is missing or the bytes do not open."""
    aead = _keyed(ring, key_id)[0]
    from cryptography.exceptions import InvalidTag

    try:
        return aead.decrypt(nonce, ciphertext, aad)
    except InvalidTag:
        raise KeyRingError(
            f"sealed data under key id {key_id!r} does not open: the key differs from the "
            "one it was sealed with, or the bytes were altered"
        ) from None


def address(ring: KeyRing, plaintext: bytes) -> str:
    """A blob's address under this ring: HMAC-SHA256 of its plaintext, hex."""
    return hmac.new(ring.address, plaintext, hashlib.sha256).hexdigest()
