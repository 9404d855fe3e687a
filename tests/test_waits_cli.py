"""`tether signal`, `tether runs --status waiting` and `tether show` on a parked run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.agents import uid
from tests.test_cli import tether
from tests.waits_agents import approvals
from tether import Runtime, Status, store_from_url


async def test_signal_from_the_command_line_answers_a_parked_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    run_id = uid("cli")
    async with store_from_url(url) as store:
        outcome = await Runtime(store).start(approvals, {"n": 2}, run_id=run_id)
    assert outcome.status is Status.WAITING

    listed = tether(tmp_path, "--db", url, "runs", "--status", "waiting", "--json")
    waiting = json.loads(listed.stdout)
    assert [r["run_id"] for r in waiting] == [run_id]
    assert waiting[0]["reason"] == "waiting for approve-0, approve-1"
    shown = tether(tmp_path, "--db", url, "show", run_id).stdout
    assert "wait approve-1" in shown
    assert f"answer with: tether signal {run_id} approve-1 --data JSON" in shown
    assert '"tool": "delete_file"' in shown

    bad = tether(tmp_path, "--db", url, "signal", run_id, "approve-7", check=False)
    assert bad.returncode != 0 and "no wait with this key" in bad.stdout + bad.stderr
    bad = tether(
        tmp_path, "--db", url, "signal", run_id, "approve-0", "--data", '{"approve": 1}',
        check=False,
    )  # fmt: skip
    assert bad.returncode != 0 and "not of type 'boolean'" in bad.stdout + bad.stderr
    bad = tether(tmp_path, "--db", url, "signal", run_id, "approve-0", "--data", "{", check=False)
    assert bad.returncode != 0 and "bad --data: not JSON" in bad.stdout + bad.stderr
    bad = tether(tmp_path, "--db", url, "signal", "no-such-run", "approve-0", check=False)
    assert bad.returncode != 0 and "unknown run 'no-such-run'" in bad.stdout + bad.stderr

    ok = tether(
        tmp_path, "--db", url, "signal", run_id, "approve-0", "--data", '{"approve": true}',
        "--event-id", "cli-1",
    ).stdout  # fmt: skip
    assert "event for wait 'approve-0' recorded at seq" in ok
    again = tether(
        tmp_path, "--db", url, "signal", run_id, "approve-0", "--data", '{"approve": true}',
        "--event-id", "cli-1",
    ).stdout  # fmt: skip
    assert "recorded before; nothing new" in again
    tether(tmp_path, "--db", url, "signal", run_id, "approve-1", "--data", '{"approve": false}')
    async with store_from_url(url) as store:
        done = await Runtime(store).resume(run_id)
    assert done.status is Status.SUCCEEDED
    assert done.result == [[0, "done"], [1, "rejected"]]


def test_demo_approve_parks_prints_the_signal_command_and_resumes_later(tmp_path: Path) -> None:
    out = tether(tmp_path, "demo", "--approve", "--quiet", stdin=subprocess.DEVNULL).stdout
    assert "status: waiting (waiting for approve-" in out
    command = next(line for line in out.splitlines() if "answer with: tether signal" in line)
    _, _, run_id, key, *_ = command.split("answer with: ")[1].split()
    assert '"tool": "calc"' in out and '"expression": "0.3 * 40"' in out
    # The process is gone (a run parked is a row): answer from another shell, then resume.
    signalled = tether(tmp_path, "signal", run_id, key, "--data", '{"approve": true}').stdout
    assert f"event for wait '{key}' recorded" in signalled
    resumed = tether(tmp_path, "resume", run_id, "--quiet").stdout
    assert "status: succeeded" in resumed
    assert "Checkpointing 40 turns costs about 12.0 ms in total." in resumed
