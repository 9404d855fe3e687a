"""Signals to a real `tether worker`: a second SIGTERM ends the grace period at once, and a
drain wakes a node sleeping in its retry back-off.

The worker gets a grace period (and the node a back-off) of ten minutes, and the test waits
two at most: a worker that honoured neither signal as it should would still be waiting.
Every signal is sent after a handshake (a file the node created, a line the worker logged).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tether as tether_pkg

ROOT = Path(__file__).resolve().parents[1]
# Far longer than the test waits: only the behaviour under test ends the worker in time.
LONG = "600"
WAIT_S = 120


def env(home: Path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    src = str(Path(tether_pkg.__file__).resolve().parent.parent)
    e.update(TETHER_DATA_DIR=str(home / ".tether"), PYTHONPATH=os.pathsep.join([src, str(ROOT)]))
    return e


def tether(home: Path, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=home,
        env=env(home),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert proc.returncode == 0, f"tether {args} exited {proc.returncode}:\n{proc.stderr}"
    return proc.stdout


def wait_for_file(path: Path, proc: subprocess.Popen[str]) -> None:
    """A handshake by polling: the node creates the file when it gets there."""
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        assert proc.poll() is None, f"the worker exited before {path.name} appeared"
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[str]]]:
    """The workers a test starts; any still running when it ends (it failed) is killed."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def start_worker(home: Path, workers: list[subprocess.Popen[str]]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "worker", "--grace", LONG],
        cwd=home,
        env=env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    workers.append(proc)
    assert proc.stdout is not None and "ready" in proc.stdout.readline()
    return proc


def wait_for_line(lines: Iterator[str], text: str, seen: list[str]) -> None:
    for line in lines:
        seen.append(line)
        if text in line:
            return
    raise AssertionError(f"the worker ended without logging {text!r}:\n{''.join(seen)}")


def submit(home: Path, agent: str, spec: dict[str, str]) -> str:
    return tether(home, "submit", agent, "--input", json.dumps(spec)).strip()


def show(home: Path, run_id: str) -> dict[str, Any]:
    shown: dict[str, Any] = json.loads(tether(home, "show", run_id, "--json"))
    return shown


def recorded(home: Path, run_id: str) -> list[str]:
    """The kinds of the run's recorded (completed or failed) nodes, in order."""
    return [
        n["kind"] for n in show(home, run_id)["nodes"] if n["status"] in ("completed", "failed")
    ]


def test_a_second_sigterm_ends_the_grace_period_at_once(
    tmp_path: Path, workers: list[subprocess.Popen[str]]
) -> None:
    started, release = tmp_path / "started", tmp_path / "release"
    spec = {"started": str(started), "release": str(release)}
    run_id = submit(tmp_path, "tests.signal_agents:stuck", spec)
    proc = start_worker(tmp_path, workers)
    assert proc.stderr is not None
    seen: list[str] = []
    lines = iter(proc.stderr)
    wait_for_line(lines, f"run {run_id}: claimed at epoch 1", seen)
    wait_for_file(started, proc)  # `hold` is in flight (so its parent is recorded)
    proc.send_signal(signal.SIGTERM)
    wait_for_line(lines, "draining 1 runs", seen)  # the first signal: a drain began
    assert proc.poll() is None  # `hold` ignores the drain: the worker waits for it
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=WAIT_S)
    err = "".join(seen) + err
    assert proc.returncode == 0, err
    assert f"run {run_id}: released paused (drain)" in err
    # The cancelled node was not recorded; it runs again when the run is resumed.
    assert recorded(tmp_path, run_id) == ["root"]
    release.touch()
    resumed = tether(tmp_path, "resume", run_id, "--quiet")
    assert "status: succeeded" in resumed
    assert recorded(tmp_path, run_id) == ["root", "hold"]


def test_a_drain_wakes_a_node_sleeping_in_its_retry_back_off(
    tmp_path: Path, workers: list[subprocess.Popen[str]]
) -> None:
    failed = tmp_path / "failed"
    run_id = submit(tmp_path, "tests.signal_agents:patient", {"failed": str(failed)})
    proc = start_worker(tmp_path, workers)
    assert proc.stderr is not None
    seen: list[str] = []
    lines = iter(proc.stderr)
    wait_for_line(lines, f"run {run_id}: claimed at epoch 1", seen)
    # The executor logs the failed attempt, then sleeps its ten-minute back-off.
    wait_for_line(lines, "attempt 1 failed", seen)
    assert failed.exists()
    proc.send_signal(signal.SIGTERM)  # one signal: a drain, no hurry
    _, err = proc.communicate(timeout=WAIT_S)
    err = "".join(seen) + err
    assert proc.returncode == 0, err
    assert f"run {run_id}: released paused (drain)" in err
    # The node in back-off stopped unrecorded: no failure was recorded for it.
    assert recorded(tmp_path, run_id) == ["root"]
    resumed = tether(tmp_path, "resume", run_id, "--quiet")
    assert "status: succeeded" in resumed
    done = show(tmp_path, run_id)
    flaky = [n for n in done["nodes"] if n["kind"] == "flaky"]
    # Resumed, the node starts afresh and its first attempt (the file exists now) succeeds.
    assert [(n["status"], n["attempt"]) for n in flaky] == [("completed", 1)]
