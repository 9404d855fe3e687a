"""The bench code runs: its quickest families at tiny sizes give well-formed lines and files.

No timing is asserted (the machines are noisy); `python -m bench` is where numbers live.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from bench import scheduling
from bench.common import Line, Settings
from bench.rehydrate import make_log
from bench.report import write_json, write_png
from tether.records import decode_log


def well_formed(line: Line) -> None:
    assert line.what and line.unit and line.floor_name
    assert math.isfinite(line.value) and line.value > 0
    assert line.floor is None or (math.isfinite(line.floor) and line.floor > 0)
    assert line.verdict in ("pass", "MISS", "info")


def test_scheduling_lines(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(scheduling, "FAN_WIDTH", 20)
    settings = Settings(quick=True, workdir=tmp_path)
    monkeypatch.setattr(Settings, "size", lambda self, quick, full: min(quick, 50))
    lines = scheduling.run(settings)
    assert len(lines) >= 2
    for line in lines:
        well_formed(line)
        assert line.ok is not None and line.target.startswith("<")

    json_path = write_json(lines, tmp_path / "r.json", mode="smoke", elapsed_s=1.0)
    doc = json.loads(json_path.read_text())
    assert [d["what"] for d in doc["lines"]] == [ln.what for ln in lines]
    assert all(d["ratio"] > 0 for d in doc["lines"])
    png = write_png(lines, tmp_path / "r.png", title="smoke")
    assert png.read_bytes().startswith(b"\x89PNG")


def test_rehydrate_log_is_the_executors() -> None:
    rows = asyncio.run(make_log(30))
    records = decode_log("smoke", rows)
    assert len(records) == 32  # run started, 30 nodes, run finished
    assert records[1].WhichOneof("body") == "node_completed"
