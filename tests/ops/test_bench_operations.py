"""bench/operations.py runs at tiny sizes and gives well-formed lines (no timing asserted)."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

from bench.operations import overhead_lines, prune_lines


def test_operations_bench_lines(tmp_path: Path) -> None:
    lines = asyncio.run(prune_lines("SQLite", f"sqlite:///{tmp_path / 'p.db'}", 5, 3))
    lines += asyncio.run(overhead_lines("memory", "memory:", 2, 3, 1))
    assert len(lines) == 5  # prune; encrypted run, load; traced run, metered run
    for line in lines:
        assert line.family == "operations" and line.unit and line.floor_name
        assert math.isfinite(line.value) and line.value > 0
        assert line.floor is not None and line.floor > 0 and line.verdict == "info"
