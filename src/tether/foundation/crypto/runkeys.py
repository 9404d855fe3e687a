"""Per-run data keys (envelope encryption), so that a run can be crypto-shredded.

A run with its own key has its values and blobs sealed under a random 256-bit data key,
named `run:<run id>` where a sealed value or blob names its key. The data key is kept in
the store wrapped (sealed) under the key ring's current key, bound to the run id; the ring
itself never leaves the process. Destroying the wrapped key (`tether runs delete --shred`)
makes every copy of what it sealed unreadable: a fork's rows, a backup of the blob store,
an exported `.tlog`.

`RunKeyBox` is one reader's (or one run's writer's) view: the ring plus the run keys it
has unwrapped, fetched from the store when a sealed value names one it lacks. A key the
store holds no longer (shredded) is remembered as such; readers show what it sealed as
`{"$shredded": ...}` (`shredded_marker`).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from tether.foundation.crypto.keyring import KEY_BYTES, KeyRing
from tether.foundation.crypto.seal import NONCE_BYTES, open_sealed, seal
from tether.foundation.errors import KeyRingError

PREFIX = "run:"
_WRAP_AAD = b"tether run key v1\0"
_ADDRESS = b"tether run address v1"

# What fetches a run's wrapped key: the run id -> (wrapped key or None, shredded_at).
Fetch = Callable[[str], Awaitable[tuple[bytes | None, float | None] | None]]


class DataShredded(KeyRingError):
    """Data sealed under a run key that was destroyed (`tether runs delete --shred`)."""

    def __init__(self, run_id: str, shredded_at: float | None = None) -> None:
        self.run_id = run_id
        self.shredded_at = shredded_at
        super().__init__(
            f"data of run {run_id} was crypto-shredded: its key is destroyed, nothing it "
            "sealed can be read any more"
        )

    def marker(self) -> dict[str, Any]:
        return shredded_marker(self.run_id, self.shredded_at)


def shredded_marker(run_id: str, shredded_at: float | None = None) -> dict[str, Any]:
    """What a reader shows in place of a value whose run key was destroyed."""
    return {"$shredded": {"run_id": run_id, "shredded_at": shredded_at}}


def key_id_of_run(run_id: str) -> str:
    return PREFIX + run_id


def run_of_key(key_id: str) -> str | None:
    """The run id a key id names, or None for a key of the ring."""
    return key_id[len(PREFIX) :] if key_id.startswith(PREFIX) else None


def new_run_key(ring: KeyRing, run_id: str) -> tuple[bytes, bytes]:
    """A new data key for `run_id` and its wrapped form (what the store keeps):
    len(ring key id) | ring key id | nonce | ciphertext + tag."""
    key = secrets.token_bytes(KEY_BYTES)
    return key, wrap(ring, run_id, key)


def wrap(ring: KeyRing, run_id: str, key: bytes) -> bytes:
    key_id, nonce, ciphertext = seal(ring, key, _WRAP_AAD + run_id.encode())
    kid = key_id.encode()
    return bytes([len(kid)]) + kid + nonce + ciphertext


def wrapped_under(wrapped: bytes) -> str:
    """The id of the ring key a wrapped run key is sealed under."""
    n = wrapped[0] if wrapped else 0
    return wrapped[1 : 1 + n].decode(errors="replace")


async def rewrap_all(ring: KeyRing, keys: Any) -> tuple[int, int, list[str]]:
    """Wrap every kept run key of the store's `keys` (a `RunKeys`) again under the ring's
    current key: (rewrapped, current already, the runs whose key this ring cannot open, left
    as they are). Old ring keys can then leave the ring once nothing else they sealed is
    kept."""
    done = current = 0
    unopened: list[str] = []
    for row in await keys.kept():
        if wrapped_under(row.wrapped) == ring.current:
            current += 1
            continue
        try:
            fresh = wrap(ring, row.run_id, unwrap(ring, row.run_id, row.wrapped))
        except KeyRingError:
            unopened.append(row.run_id)
            continue
        done += int(await keys.rewrap(row.run_id, row.wrapped, fresh))
    return done, current, unopened


def unwrap(ring: KeyRing, run_id: str, wrapped: bytes) -> bytes:
    """The data key; KeyRingError if the ring lacks the wrapping key or the bytes differ."""
    n = wrapped[0] if wrapped else 0
    key_id = wrapped[1 : 1 + n].decode(errors="replace")
    rest = wrapped[1 + n :]
    try:
        return open_sealed(ring, key_id, rest[:NONCE_BYTES], rest[NONCE_BYTES:],
                           _WRAP_AAD + run_id.encode())  # fmt: skip
    except KeyRingError as exc:
        raise KeyRingError(f"the data key of run {run_id}: {exc}") from None


def address_key(key: bytes) -> bytes:
    """The key that addresses a run's blobs (an HMAC of their plaintext under it)."""
    return hmac.new(key, _ADDRESS, hashlib.sha256).digest()


class RunKeyBox:
    """The ring plus the run keys unwrapped so far, and (once `bind` is called) the run
    whose key seals what is written. `ring` is what `seal`/`open_sealed` are given: a ring
    whose keys grow as run keys are fetched, whose current key is the bound run's."""

    def __init__(self, base: KeyRing, fetch: Fetch | None = None) -> None:
        self.base = base
        self.fetch = fetch
        self.ring = KeyRing(dict(base.keys), base.current, base.address)
        self.shredded: dict[str, float | None] = {}

    def bind(self, run_id: str, key: bytes) -> None:
        """Seal what is written from now on under this run's key."""
        kid = key_id_of_run(run_id)
        self.ring.keys[kid] = key
        self.ring = KeyRing(self.ring.keys, kid, address_key(key))

    async def have(self, key_id: str) -> None:
        """Make sure the ring holds `key_id`: a run key is fetched and unwrapped on first
        use. DataShredded if it was destroyed; a ring key it lacks is left to `open_sealed`
        to name."""
        if key_id in self.ring.keys:
            return
        run_id = run_of_key(key_id)
        if run_id is None:
            return
        if run_id in self.shredded:
            raise DataShredded(run_id, self.shredded[run_id])
        row = None if self.fetch is None else await self.fetch(run_id)
        if row is None or row[0] is None:
            self.shredded[run_id] = None if row is None else row[1]
            raise DataShredded(run_id, self.shredded[run_id])
        self.ring.keys[key_id] = unwrap(self.base, run_id, row[0])

    def address_key_of(self, key_id: str) -> bytes:
        """The address key of blobs sealed under `key_id` (which the ring holds)."""
        if run_of_key(key_id) is not None:
            return address_key(self.ring.keys[key_id])
        return self.base.address
