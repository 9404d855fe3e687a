"""The key ring: key ids -> 256-bit keys, one of them current, and an address key.

`TETHER_KEYS` holds the ring as JSON, or `@/path/to/ring.json`:

    {"current": "k2", "keys": {"k1": "<base64 32 bytes>", "k2": "..."}, "address": "<base64>"}

New data is sealed under `current`; every id in `keys` still opens what it sealed, so
keys rotate without rewriting logs. `address` keys the blob addresses (an HMAC of the
plaintext instead of its bare sha256), so equal plaintexts are not visible as equal
addresses across rings; it must stay the same for the ring's whole life.
"""

from __future__ import annotations

import base64
import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.foundation.errors import KeyRingError

KEY_BYTES = 32
ENV = "TETHER_KEYS"


def generate_key() -> str:
    """A new random 256-bit key, base64."""
    return base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()


def _key(where: str, text: Any) -> bytes:
    if not isinstance(text, str):
        raise KeyRingError(f"{where}: a key is a base64 string of {KEY_BYTES} bytes")
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        raise KeyRingError(f"{where}: not valid base64") from None
    if len(raw) != KEY_BYTES:
        raise KeyRingError(f"{where}: {len(raw)} bytes, a key must be {KEY_BYTES} (256 bits)")
    return raw


@dataclass(frozen=True)
class KeyRing:
    """Keys by id, the id new data is sealed under, and the blob address key."""

    keys: dict[str, bytes]
    current: str
    address: bytes

    def __post_init__(self) -> None:
        if self.current not in self.keys:
            raise KeyRingError(f"key ring: current key {self.current!r} is not in its keys")

    # Per key id: its cipher and nonce key, made once (key setup costs more than a seal).
    cache: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def key(self, key_id: str) -> bytes:
        """The key with this id; KeyRingError naming it if the ring lacks it."""
        try:
            return self.keys[key_id]
        except KeyError:
            raise KeyRingError(
                f"data sealed under key id {key_id!r}, which the key ring lacks (it has "
                f"{', '.join(sorted(self.keys))}); add that key to {ENV}"
            ) from None

    @classmethod
    def parse(cls, text: str, where: str = ENV) -> KeyRing:
        """Read a ring from its JSON; KeyRingError naming what is wrong."""
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise KeyRingError(f"{where}: the key ring is not JSON ({exc})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("keys"), dict) or not doc["keys"]:
            raise KeyRingError(
                f'{where}: expected {{"current": ID, "keys": {{ID: base64 key, ...}}, '
                '"address": base64 key}'
            )
        keys = {str(kid): _key(f"{where}: key {kid!r}", v) for kid, v in doc["keys"].items()}
        if "address" not in doc:
            raise KeyRingError(f'{where}: the ring has no "address" key')
        current = doc.get("current")
        if not isinstance(current, str):
            raise KeyRingError(f'{where}: "current" must name one of the keys')
        return cls(keys, current, _key(f"{where}: address", doc["address"]))

    def dump(self) -> str:
        """The ring as the JSON `parse` reads."""
        return json.dumps(
            {
                "current": self.current,
                "keys": {k: base64.b64encode(v).decode() for k, v in self.keys.items()},
                "address": base64.b64encode(self.address).decode(),
            },
            indent=2,
        )

    def with_new_key(self, key_id: str) -> KeyRing:
        """This ring plus a new random key, which becomes current."""
        if key_id in self.keys:
            raise KeyRingError(f"key ring: key id {key_id!r} is taken")
        raw = base64.b64decode(generate_key())
        return KeyRing({**self.keys, key_id: raw}, key_id, self.address)

    @classmethod
    def new(cls, key_id: str = "k1") -> KeyRing:
        return cls({key_id: base64.b64decode(generate_key())}, key_id,
                   base64.b64decode(generate_key()))  # fmt: skip


def load_ring(value: str | None) -> KeyRing | None:
    """The ring in `value` ($TETHER_KEYS: the ring, or `@path` of a file holding it), or None
    if encryption is not configured."""
    text = value
    if not text or not text.strip():
        return None
    where = ENV
    if text.startswith("@"):
        path = Path(text[1:])
        where = f"{ENV} file {path}"
        try:
            text = path.read_text()
        except OSError as exc:
            raise KeyRingError(f"{where}: cannot read it ({exc.strerror})") from None
    return KeyRing.parse(text, where)
