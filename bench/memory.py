"""Memory: resident memory of one hot 5,000-node run, and of one process holding 1,000 runs.

Each case runs in a fresh subprocess (`python -m bench.memory_probe CASE N`) that measures
its own RSS after imports and a warm-up, then again with the runs resident, and prints the
delta as JSON. The log goes to a store that validates and discards appends, so the delta is
the runtime's own state, not a copy of the log. The floor is the log bytes those runs wrote:
the ratio is how many times its own log a resident run takes in memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.common import Line, Settings

ROOT = Path(__file__).resolve().parent.parent


def probe(case: str, n: int) -> dict[str, float]:
    """Run one probe in a subprocess and return its JSON report."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.memory_probe", case, str(n)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    report: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return report


def run(settings: Settings) -> list[Line]:
    hot = probe("hot", 5000)
    runs = settings.size(1000, 1000)
    held = probe("held", runs)
    mib = 1024 * 1024
    return [
        Line(
            "memory",
            "RSS of one hot run of 5,000 nodes",
            hot["rss_delta"] / mib,
            "MiB",
            "its log bytes",
            hot["log_bytes"] / mib,
            note=f"{hot['rss_delta'] / 5000 / 1024:.2f} KiB a node",
        ),
        Line(
            "memory",
            f"RSS of one process holding {runs:,} runs (each parked in its 11th node)",
            held["rss_delta"] / mib,
            "MiB",
            "their log bytes",
            held["log_bytes"] / mib,
            note=f"{held['rss_delta'] / runs / 1024:.1f} KiB a run",
        ),
    ]
