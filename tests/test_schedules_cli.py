"""`tether schedule` on the embedded SQLite store: bad input refused with one line, and a
worker firing an every-second schedule, one run per fire time."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.flow_processes import env
from tether import Status

AGENT = "tests.schedule_agents:tick"


def tether(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    e = env()
    e["TETHER_DATA_DIR"] = str(home / ".tether")
    return subprocess.run(
        [sys.executable, "-m", "tether", *args], cwd=home, env=e, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip


def runs_listed(home: Path) -> list[dict[str, str]]:
    listed: list[dict[str, str]] = json.loads(tether(home, "runs", "--json").stdout)
    return listed


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--cron", "*/0 * * * *", "--agent", AGENT], "error: cron '*/0 * * * *': step '0'"),
        (["--cron", "0 3 * * *", "--agent", AGENT, "--timezone", "Moon/Base"], "time zone"),
        (["--cron", "0 3 * * *", "--agent", "tests.nothing:x"], "error: unknown agent"),
        (["--cron", "0 3 * * *", "--agent", AGENT, "--input", "{"], "bad --input: not JSON"),
    ],
)
def test_bad_input_is_one_line_and_stores_nothing(
    tmp_path: Path, args: list[str], says: str
) -> None:
    done = tether(tmp_path, "schedule", "add", "nightly", *args)
    assert done.returncode != 0
    assert says in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    listed = tether(tmp_path, "schedule", "list", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []


def test_a_worker_fires_an_every_second_schedule_on_sqlite(tmp_path: Path) -> None:
    added = tether(tmp_path, "schedule", "add", "tick", "--cron", "* * * * * *",
                   "--agent", AGENT, "--input", '"hi"')  # fmt: skip
    assert added.returncode == 0, added.stdout + added.stderr
    e = env()
    e["TETHER_DATA_DIR"] = str(tmp_path / ".tether")
    worker = subprocess.Popen(
        [sys.executable, "-m", "tether", "worker"], cwd=tmp_path, env=e,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert worker.stdout is not None and "ready" in worker.stdout.readline()
    time.sleep(3)  # a few fire times pass
    removed = tether(tmp_path, "schedule", "remove", "tick")
    assert removed.returncode == 0 and "removed" in removed.stdout
    # The run of the last fire time before the removal may not be claimed yet: a drain now
    # would leave it queued (or paused). Stop the worker once every run has finished.
    deadline = time.monotonic() + 60
    while not all(Status(r["status"]).finished for r in runs_listed(tmp_path)):
        assert time.monotonic() < deadline, "the schedule's runs did not finish in 60 s"
        time.sleep(0.2)
    worker.send_signal(signal.SIGTERM)
    worker.communicate(timeout=60)
    assert worker.returncode == 0
    runs = runs_listed(tmp_path)
    ids = sorted(r["run_id"] for r in runs)
    assert len(ids) >= 2 and all(i.startswith("sched-tick-") for i in ids)
    seconds = [int(i[-3:-1]) for i in ids]  # ...T101503Z: the fire times' seconds
    assert all((b - a) % 60 == 1 for a, b in itertools.pairwise(seconds))
    assert {r["status"] for r in runs} == {"succeeded"}
