"""Durations as operators write them: `90s`, `30m`, `12h`, `30d`, `2w`, or `1d12h`."""

from __future__ import annotations

import re

from tether.foundation.errors import InvalidDuration

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str) -> float:
    """Seconds in `text`; InvalidDuration naming it if it is not one (or not positive)."""
    spec = text.strip().lower()
    parts = _PART.findall(spec)
    if not spec or "".join(n + u for n, u in parts) != spec:
        raise InvalidDuration(text)
    seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise InvalidDuration(text)
    return seconds
