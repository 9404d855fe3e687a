"""`tether retry RUN` (here, or `--queue` for a worker) and the attempt history in `tether
show` and `tether show --json`, as a user runs them, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agents import uid
from tests.retry_agents import agent
from tests.test_cli import env
from tether import Runtime, Status, store_from_url

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    url: str = request.getfixturevalue("fresh_pg_database")
    return url


def tether(home: Path, db: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    e = env(home)
    e["PYTHONPATH"] += f":{ROOT}"  # `tests.retry_agents`
    proc = subprocess.run(
        [sys.executable, "-m", "tether", "--db", db, *args],
        cwd=home, env=e, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if check and proc.returncode != 0:
        raise AssertionError(f"tether {args} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return proc


async def _failed(db: str, marker: Path) -> str:
    run_id = uid("cli-retry")
    async with store_from_url(db) as store:
        outcome = await Runtime(store).start(agent, {"outage": str(marker)}, run_id=run_id)
    assert outcome.status is Status.FAILED
    return run_id


async def test_tether_retry_reopens_a_failed_run_and_show_tells_its_attempts(
    tmp_path: Path, db: str
) -> None:
    marker = tmp_path / "outage"
    marker.touch()
    run_id = await _failed(db, marker)
    refused = tether(tmp_path, db, "retry", "no-such-run", check=False)
    assert refused.returncode != 0 and "unknown run 'no-such-run'" in refused.stderr

    marker.unlink()
    out = tether(tmp_path, db, "retry", run_id, "--quiet").stdout
    assert "status: succeeded" in out, out

    shown = tether(tmp_path, db, "show", run_id).stdout
    assert f"run {run_id} [tests.retry_agents] succeeded" in shown
    assert "retry 1 at seq " in shown and "it had failed (node " in shown
    assert "attempt 2 failed: ConnectionError: model unreachable (attempt 2)" in shown
    assert "attempt 3 completed" in shown
    view = json.loads(tether(tmp_path, db, "show", run_id, "--json").stdout)
    [retry] = view["retries"]
    [flaky] = [n for n in view["nodes"] if n["kind"] == "flaky"]
    assert retry["node_ids"] == [flaky["node_id"]]
    assert [(a["attempt"], a["status"]) for a in flaky["attempts"]] == [
        (2, "failed"),
        (3, "completed"),
    ]
    logged = tether(tmp_path, db, "logs", run_id).stdout
    assert "retried (the failed run reopened)" in logged

    again = tether(tmp_path, db, "retry", run_id, check=False)
    assert again.returncode == 2
    assert f"run {run_id} is succeeded, not failed; only a failed run can be retried" in (
        again.stderr
    )


async def test_tether_retry_queue_leaves_the_run_to_a_worker(tmp_path: Path, db: str) -> None:
    marker = tmp_path / "outage"
    marker.touch()
    run_id = await _failed(db, marker)
    marker.unlink()
    out = tether(tmp_path, db, "retry", run_id, "--queue").stdout
    assert f"run {run_id}: retry recorded; queued for a worker" in out
    listed = json.loads(tether(tmp_path, db, "runs", "--json").stdout)
    assert [r["status"] for r in listed if r["run_id"] == run_id] == ["queued"]
    resumed = tether(tmp_path, db, "resume", run_id, "--quiet").stdout
    assert "status: succeeded" in resumed
