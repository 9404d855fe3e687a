"""Every table command fits 80 columns (a pipe, a CI log) without wrapping a cell, and ids a
user copies are whole (issue 40): `runs`, `history`, `workers`, `limits list`, `schedule
list`, rendered by real `tether` processes at COLUMNS=80."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_cli import env, tether

WIDTH = 80


def at_80(home: Path, *args: str) -> list[str]:
    e = env(home) | {"COLUMNS": str(WIDTH)}
    proc = subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=home,
        env=e,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = proc.stdout.splitlines()
    too_long = [line for line in lines if len(line) > WIDTH]
    assert not too_long, proc.stdout
    return lines


def as_json(home: Path, *args: str) -> Any:
    return json.loads(tether(home, *args, "--json").stdout)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A store with a finished demo (and its sub-agent run), one paused by its budget, one
    whose owner was killed with a long lease left, a schedule, limits and a live worker."""
    home = tmp_path_factory.mktemp("columns")
    tether(home, "demo", "--quiet")
    tether(home, "demo", "--quiet", "--budget", "nodes=2")
    tether(home, "demo", "--quiet", "--stop-after", "2", "--lease-ttl", "600", check=False)
    tether(home, "schedule", "add", "nightly-team-digest", "--cron", "0 3 * * *",
           "--agent", "demo", "--timezone", "America/Argentina/Buenos_Aires")  # fmt: skip
    tether(home, "limits", "set", "--agent", "demo", "--key", "customer-4711", "--max-running", "2")
    tether(home, "limits", "set", "--model", "openai:gpt-4.1-mini-2025-04-14", "--rpm", "60")
    worker = subprocess.Popen(
        [sys.executable, "-m", "tether", "worker", "--poll", "0.2"],
        cwd=home,
        env=env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert worker.stdout is not None
    for line in worker.stdout:  # the worker says when it is ready (and beating)
        if " ready on " in line:
            break
    try:
        yield home
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=60)


def test_runs_fits_80_columns_with_whole_run_ids(home: Path) -> None:
    rows = as_json(home, "runs")
    lines = at_80(home, "runs")
    text = "\n".join(lines)
    assert len(lines) == 1 + len(rows)  # one line a run: no cell wrapped
    for r in rows:
        parent = r["parent_run_id"]
        assert (r["run_id"][len(parent) :] if parent else r["run_id"]) in text
    # Owner and lease in one short cell; a long reason cut with an ellipsis.
    [running] = [r for r in rows if r["state"] == "running"]
    [line] = [line for line in lines if line.startswith(running["run_id"])]
    assert re.search(rf"  {re.escape(running['owner'])} \d+s ", line), line
    [paused] = [line for line in lines if " paused " in line]
    assert "budget: node" in paused


def test_a_sub_agent_run_listed_alone_shows_its_full_id(home: Path) -> None:
    [sub] = as_json(home, "runs", "--agent", "demo.analyst")
    lines = at_80(home, "runs", "--agent", "demo.analyst")
    assert lines[1].startswith(sub["run_id"] + " ")


def test_history_prints_whole_node_ids_in_80_columns(home: Path) -> None:
    [done] = as_json(home, "runs", "--status", "succeeded", "--agent", "demo")
    steps = as_json(home, "history", done["run_id"])
    lines = at_80(home, "history", done["run_id"])
    assert len(lines) == 1 + len(steps) + 1  # heading, one line a record, the fork hint
    for step, line in zip(steps, lines[1:], strict=False):
        assert line.split()[0] == str(step["seq"])
        if step["node_id"]:
            assert f" {step['node_id']} " in line


def test_workers_fits_80_columns(home: Path) -> None:
    [worker] = as_json(home, "workers")
    lines = at_80(home, "workers")
    assert len(lines) == 2 and lines[1].startswith(worker["owner"] + " ")


def test_limits_and_schedules_fit_80_columns(home: Path) -> None:
    text = "\n".join(at_80(home, "limits", "list"))
    assert "customer-4711" in text and "openai:gpt-4.1" in text
    lines = at_80(home, "schedule", "list")
    assert len(lines) == 2 and lines[1].startswith("nightly-team-digest ")
    assert "0 3 * * *" in lines[1]
