"""Turning handler values into record Values and back; the one place offloading will hook in."""

from __future__ import annotations

import json
from typing import Any

from tether.records import Value, dump_json


class ValueCodec:
    """Encodes values as inline JSON; decodes inline values and caches them by node."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    async def encode(self, obj: Any) -> Value:
        return Value(json=dump_json(obj))

    async def decode(self, value: Value) -> Any:
        kind = value.WhichOneof("kind")
        if kind == "json":
            return json.loads(value.json)
        if kind is None:
            return None
        raise ValueError(f"value kind {kind!r} needs a blob store, and none is configured")

    async def decode_cached(self, key: str, value: Value) -> Any:
        """Decode once per key (node outputs are read by every descendant that asks)."""
        try:
            return self._cache[key]
        except KeyError:
            decoded = self._cache[key] = await self.decode(value)
            return decoded
