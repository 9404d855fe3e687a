"""One word for each state (issue 40): `tether show`, its `--json` and `tether runs` call a
run the same thing, queued before a worker takes it, orphaned once its owner is gone."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from tests.test_cli import tether


def said(home: Path, run_id: str) -> dict[str, Any]:
    """The run's words as `show` (its first line), `show --json` and `runs --json` say them."""
    heading = tether(home, "show", run_id).stdout.splitlines()[0]
    view = json.loads(tether(home, "show", run_id, "--json").stdout)
    [row] = [r for r in json.loads(tether(home, "runs", "--json").stdout) if r["run_id"] == run_id]
    return {
        "show": heading.rsplit(" ", 1)[1],
        "json": (view["status"], view["state"]),
        "runs": (row["status"], row["state"]),
    }


def test_a_queued_run_is_queued_in_show_its_json_and_runs(tmp_path: Path) -> None:
    run_id = tether(tmp_path, "submit", "demo").stdout.strip()  # no worker: it stays queued
    heading = tether(tmp_path, "show", run_id).stdout.splitlines()[0]
    assert heading == f"run {run_id} [demo] queued"
    assert said(tmp_path, run_id) == {
        "show": "queued",
        "json": ("queued", "queued"),
        "runs": ("queued", "queued"),
    }


def test_paused_and_orphaned_runs_have_one_word_each(tmp_path: Path) -> None:
    tether(tmp_path, "demo", "--quiet", "--budget", "nodes=2")
    [paused] = json.loads(tether(tmp_path, "runs", "--status", "paused", "--json").stdout)
    assert said(tmp_path, paused["run_id"]) == {
        "show": "paused",
        "json": ("paused", "paused"),
        "runs": ("paused", "paused"),
    }
    # Killed mid-run under a 1 s lease: once the lease runs out its owner is gone.
    tether(tmp_path, "demo", "--quiet", "--stop-after", "2", "--lease-ttl", "1", check=False)
    deadline = time.monotonic() + 60
    while True:
        rows = json.loads(tether(tmp_path, "runs", "--status", "orphaned", "--json").stdout)
        if rows or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # polling the store's clock against the lease: no event to wait on
    [orphaned] = rows
    assert said(tmp_path, orphaned["run_id"]) == {
        "show": "orphaned",
        "json": ("running", "orphaned"),
        "runs": ("running", "orphaned"),
    }
    # As of a seq there is no row: both words are the log's at that seq.
    view = json.loads(tether(tmp_path, "show", paused["run_id"], "--json", "--at", "1").stdout)
    assert (view["status"], view["state"]) == ("running", "running")
