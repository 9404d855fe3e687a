"""How fast the demo goes: 1 is its natural pace, 0 instant.

The `tether` command gives it (`--speed`, else `$TETHER_DEMO_SPEED`: `Settings.demo_speed`)
to `demo_models(speed=...)`; code that runs the demo without the command (a test, a
script) sets `TETHER_DEMO_SPEED` or calls `set_speed`.
"""

from __future__ import annotations

import os

_speed: float | None = None


def set_speed(speed: float | None) -> None:
    """Pace the demo's tools and scripted model by `speed` (None: `$TETHER_DEMO_SPEED`)."""
    global _speed
    _speed = speed


def speed() -> float:
    if _speed is not None:
        return _speed
    return float(os.environ.get("TETHER_DEMO_SPEED", "1"))
