"""`tether runs prune`, `tether runs delete` and `tether worker --retain`, as processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.test_cli import env, tether


def all_runs(home: Path) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = json.loads(tether(home, "runs", "--json").stdout)
    return rows


def test_prune_and_delete_from_the_command_line(tmp_path: Path) -> None:
    tether(tmp_path, "demo", "--quiet")
    tether(tmp_path, "demo", "--quiet", "--question", "another")
    runs = [r for r in all_runs(tmp_path) if not r["parent_run_id"]]
    assert len(runs) == 2
    first, second = (str(r["run_id"]) for r in runs)
    out = tether(tmp_path, "runs", "delete", second).stdout
    assert f"deleted run {second}" in out and "log rows" in out and "blobs" in out
    assert [r["run_id"] for r in all_runs(tmp_path) if not r["parent_run_id"]] == [first]
    dry = tether(tmp_path, "runs", "prune", "--finished-before", "1h", "--dry-run").stdout
    assert "would remove 0 runs" in dry
    time.sleep(1.1)
    out = tether(tmp_path, "runs", "prune", "--finished-before", "1s", "--list").stdout
    assert first in out and "removed 1 run " in out
    assert all_runs(tmp_path) == []


def test_bad_retention_input_is_refused_with_nothing_deleted(tmp_path: Path) -> None:
    tether(tmp_path, "demo", "--quiet")
    before = all_runs(tmp_path)
    proc = tether(tmp_path, "runs", "prune", "--finished-before", "30x", check=False)
    assert proc.returncode == 2
    assert "duration '30x' is not valid" in proc.stdout + proc.stderr
    proc = tether(tmp_path, "runs", "delete", "nope", check=False)
    assert proc.returncode == 2 and "unknown run 'nope'" in proc.stderr
    proc = tether(tmp_path, "worker", "--retain", "soon", check=False)
    assert proc.returncode == 2 and "duration 'soon' is not valid" in proc.stderr
    assert all_runs(tmp_path) == before


def test_worker_retain_prunes_finished_runs(tmp_path: Path) -> None:
    tether(tmp_path, "demo", "--quiet")
    assert all_runs(tmp_path)
    worker = subprocess.Popen(
        [sys.executable, "-m", "tether", "worker", "--retain", "0.5s", "--retain-every", "0.2"],
        cwd=tmp_path,
        env=env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while all_runs(tmp_path):
            assert time.monotonic() < deadline, "the worker pruned nothing in 60 s"
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
    assert "'pruned': 1" in out, out + err
    assert "retention pruned 1 runs" in err
