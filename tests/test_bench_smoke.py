"""The bench code runs: every family at tiny sizes gives well-formed lines and files.

No timing is asserted (the machines are noisy); `python -m bench` is where numbers live.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
from pathlib import Path

import pytest

from bench import (
    common,
    fork,
    growth,
    integrations,
    overlap,
    partitions,
    rehydrate,
    scheduling,
    steps,
    throughput,
    tlog,
    workers,
)
from bench.__main__ import FAMILIES, NEEDS_PG
from bench.common import Line, Settings, drop_pg, prepare_pg
from bench.readme import END, START, update
from bench.rehydrate import make_log
from bench.report import write_json, write_png
from tether.model.records import decode_log


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

    # --readme: the table between the markers is replaced, the rest of the page kept.
    page = tmp_path / "docs" / "benchmarks.md"
    page.parent.mkdir()
    page.write_text(f"# Benchmarks\n\n{START}\nold table\n{END}\n\nKnown gaps.\n")
    update(lines, png, title="smoke", page=page)
    text = page.read_text()
    assert "old table" not in text and text.startswith("# Benchmarks")
    assert text.endswith(f"{END}\n\nKnown gaps.\n")
    assert all(ln.what in text for ln in lines) and "images/bench.png" in text
    assert (page.parent / "images" / "bench.png").read_bytes() == png.read_bytes()


def test_rehydrate_log_is_the_executors() -> None:
    rows = asyncio.run(make_log(30))
    records = decode_log("smoke", rows)
    assert len(records) == 32  # run started, 30 nodes, run finished
    assert records[1].WhichOneof("body") == "node_completed"


# What shrinks each family to a smoke run: module constants set to tiny values (every
# `Settings.size` is also capped at 10). A family missing here fails the test below.
TINY: dict[str, list[tuple[object, str, object]]] = {
    "checkpoint": [],
    "throughput": [(throughput, "CONCURRENCY", (1, 10)), (throughput, "FAN_WIDTH", 8)],
    "rehydrate": [(rehydrate, "TARGET_NODES", 40), (rehydrate, "FRESH_RESUMES", 1)],
    "scheduling": [(scheduling, "FAN_WIDTH", 20)],
    "overlap": [(overlap, "WIDTH", 5), (overlap, "WAIT_S", 0.005)],
    "growth": [
        (growth, "AT", (5, 10, 20)),
        (growth, "WINDOW", 5),
        (growth, "RUNS", 1),
        (growth, "SHORT_RUNS", 1),
    ],
    "memory": [],
    "blob_memory": [],
    "model_server": [],
    "agent": [],
    "workers": [(workers, "PROCESSES", (1, 2)), (workers, "NODES", 2)],
    "partitions": [(partitions, "PARTITIONS", 4), (partitions, "LOAD_NODES", 40)],
    "operations": [],
    "steps": [(steps, "TURNS", 5)],
    "fork": [(fork, "QUICK_SIZES", (20, 40))],
    "flow_claims": [],
    "tlog": [(tlog, "QUICK_SIZES", (20, 40))],
    "integrations": [(integrations, "RECORDS", 40)],
}


def test_every_family_has_a_smoke_run() -> None:
    assert set(TINY) == set(FAMILIES)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_gives_well_formed_lines(
    family: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for module, name, value in TINY[family]:
        monkeypatch.setattr(module, name, value)
    monkeypatch.setattr(rehydrate, "PROFILE_PATH", tmp_path / "profile.txt")
    monkeypatch.setattr(Settings, "size", lambda self, quick, full: min(quick, 10))
    # Lines, not figures: no full collection of this process's heap before each timed call.
    monkeypatch.setattr(common, "collect", lambda: gc.collect(0))
    settings = Settings(quick=True, workdir=tmp_path)
    if family in NEEDS_PG:
        asyncio.run(prepare_pg(settings))
    try:
        lines = FAMILIES[family](settings)
    finally:
        if family in NEEDS_PG:
            asyncio.run(drop_pg(settings))
    assert lines and {line.family for line in lines} == {family}
    for line in lines:
        well_formed(line)
