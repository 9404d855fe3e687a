"""One owner per run from the command line (issue 10): a crashed `tether demo` keeps its
lease until it runs out; `tether resume` refuses a live owner, `--wait` waits for its lease,
`--force` takes over; a worker adopts the orphan; two resumes at once execute it once.
Real processes and SIGKILL, on the embedded SQLite store and on PostgreSQL (a fresh
database per test)."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import tests.test_cli
from tests.test_cli import answer, run_ids, tether


def env(home: Path) -> dict[str, str]:
    return tests.test_cli.env(home)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The store URL every `tether` process of the test uses: the default SQLite file in
    the data dir, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / '.tether' / 'tether.db'}"
    url: str = request.getfixturevalue("fresh_pg_database")
    plain = tests.test_cli.env
    monkeypatch.setattr(
        tests.test_cli, "env", lambda home: {**plain(home), "TETHER_DATABASE_URL": url}
    )
    return url


def crashed_demo(home: Path, lease_ttl: float) -> str:
    """A `tether demo` SIGKILLed after 5 recorded nodes; its run id."""
    killed = tether(
        home, "demo", "--quiet", "--stop-after", "5", "--lease-ttl", str(lease_ttl), check=False
    )
    assert killed.returncode == -signal.SIGKILL
    return str(run_ids(home)[0]["run_id"])


def row(home: Path, run_id: str) -> dict[str, Any]:
    rows: list[dict[str, Any]] = json.loads(tether(home, "runs", "--json").stdout)
    return next(r for r in rows if r["run_id"] == run_id)


def node_ids(home: Path, run_id: str) -> list[str]:
    shown = json.loads(tether(home, "show", run_id, "--json").stdout)
    return [n["node_id"] for n in shown["nodes"] if n["status"] == "completed"]


@pytest.mark.usefixtures("backend")
def test_resume_of_a_crashed_demo_is_refused_while_its_lease_lasts_then_forced(
    tmp_path: Path,
) -> None:
    reference = answer(tether(tmp_path, "demo", "--quiet").stdout)
    run_id = crashed_demo(tmp_path, lease_ttl=120)
    r = row(tmp_path, run_id)
    assert r["status"] == r["state"] == "running" and r["lease_left"] > 60
    owner = r["owner"]
    refused = tether(tmp_path, "resume", run_id, "--quiet", check=False)
    assert refused.returncode == 2
    assert len(refused.stderr.splitlines()) == 1, refused.stderr  # one line, on stderr
    out = " ".join(refused.stderr.split())
    assert f"is running by {owner}, lease " in out and "s left" in out
    assert "--wait" in out and "--force" in out
    assert len(node_ids(tmp_path, run_id)) == 5  # it executed nothing
    forced = tether(tmp_path, "resume", run_id, "--force", "--quiet")
    assert f"taking run {run_id} over from {owner}" in " ".join(forced.stdout.split())
    assert answer(forced.stdout) == reference
    ids = node_ids(tmp_path, run_id)
    assert len(ids) == len(set(ids)) == 10  # the demo: 3 turns, 4 searches, analyst, calc, report


@pytest.mark.usefixtures("backend")
def test_a_crashed_demo_turns_orphaned_and_resume_wait_takes_it(tmp_path: Path) -> None:
    reference = answer(tether(tmp_path, "demo", "--quiet").stdout)
    run_id = crashed_demo(tmp_path, lease_ttl=1)
    waited = tether(tmp_path, "resume", run_id, "--wait", "--quiet")
    assert answer(waited.stdout) == reference
    assert row(tmp_path, run_id)["state"] == "succeeded"


@pytest.mark.usefixtures("backend")
def test_runs_shows_a_dead_owner_as_orphaned(tmp_path: Path) -> None:
    run_id = crashed_demo(tmp_path, lease_ttl=0.5)
    deadline = time.monotonic() + 30
    while (r := row(tmp_path, run_id))["state"] != "orphaned":
        assert time.monotonic() < deadline, r
    assert r["status"] == "running" and r["lease_left"] < 0
    table = tether(tmp_path, "runs").stdout
    # The state says orphaned; the owner's cell names the dead owner, with no lease left.
    [line] = [ln for ln in table.splitlines() if ln.startswith(run_id)]
    owner = str(r["owner"])
    assert "orphaned" in line and owner in line
    assert not re.search(rf"{re.escape(owner)} \d+s", line)
    # The filter takes the state as shown: orphaned runs are not listed as running.
    orphaned = json.loads(tether(tmp_path, "runs", "--status", "orphaned", "--json").stdout)
    assert [r["run_id"] for r in orphaned] == [run_id]
    running = json.loads(tether(tmp_path, "runs", "--status", "running", "--json").stdout)
    assert run_id not in [r["run_id"] for r in running]


@pytest.mark.usefixtures("backend")
def test_a_worker_adopts_a_crashed_demo_after_its_lease(tmp_path: Path) -> None:
    run_id = crashed_demo(tmp_path, lease_ttl=1)
    worker = subprocess.Popen(
        [sys.executable, "-m", "tether", "worker", "--poll", "0.2"],
        cwd=tmp_path,
        env=env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while (r := row(tmp_path, run_id))["status"] != "succeeded":
            assert time.monotonic() < deadline, r
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, out
    assert f"run {run_id}: claimed at epoch 2" in out
    ids = node_ids(tmp_path, run_id)
    assert len(ids) == len(set(ids)) == 10  # the demo: 3 turns, 4 searches, analyst, calc, report


@pytest.mark.usefixtures("backend")
def test_two_resumes_at_once_execute_the_run_once(tmp_path: Path) -> None:
    paused = tether(tmp_path, "demo", "--quiet", "--budget", "nodes=3").stdout
    assert "status: paused" in paused
    run_id = str(run_ids(tmp_path)[0]["run_id"])
    e = env(tmp_path)
    e["TETHER_DEMO_SPEED"] = "1"  # slow enough that the two overlap
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tether", "resume", run_id, "--quiet", "--budget", "nodes=+20"],
            cwd=tmp_path,
            env=e,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [(p.wait(timeout=120), p.communicate()[1]) for p in procs]  # errors: stderr
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    loser = " ".join(next(out for code, out in results if code == 2).split())
    # It came while the winner held the run, or after the winner had finished it.
    assert "is running by" in loser or "has finished" in loser, loser
    ids = node_ids(tmp_path, run_id)
    assert len(ids) == len(set(ids)) == 10  # the demo: 3 turns, 4 searches, analyst, calc, report


def test_a_worker_executes_a_run_queued_with_a_10_kb_input_through_the_blob_store(
    tmp_path: Path, backend: str
) -> None:
    # Queued as `tether serve` queues it: through a runtime with the default blob store, so
    # the 10 KB input is offloaded and the record keeps only its ref.
    import asyncio

    from tether import Runtime, Status
    from tether.blobs.factory import open_blob_store
    from tether.model.records import decode_log
    from tether.store import store_from_url

    db = backend
    blob_dir = str(tmp_path / ".tether" / "blobs")  # where the worker's default points
    big = {"width": 2, "pad": "x" * 10_000}

    async def queue() -> str:
        async with store_from_url(db) as store, open_blob_store(blob_dir) as blobs:
            run_id = await Runtime(store, blobs=blobs).submit("tests.agents:fanout", big)
            [first] = decode_log(run_id, await store.log.read_all(run_id))
            assert first.run_started.input.WhichOneof("kind") == "blob"  # offloaded
            return run_id

    run_id = asyncio.run(queue())
    e = env(tmp_path)
    e["PYTHONPATH"] += f":{Path(__file__).resolve().parents[1]}"  # `tests.agents`
    worker = subprocess.Popen(
        [sys.executable, "-m", "tether", "worker", "--poll", "0.2"],
        cwd=tmp_path,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while (r := row(tmp_path, run_id))["status"] in ("queued", "running"):
            assert time.monotonic() < deadline, r
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=60)
    assert r["status"] == Status.SUCCEEDED.value, (r, out)


def test_resume_force_fences_a_live_worker_on_postgres(
    tmp_path: Path, fresh_pg_database: str
) -> None:
    # A real `tether worker` executes a slow demo run; `tether resume --force` takes it
    # over mid-run. The worker's next append is refused (fenced): it stops the run without
    # marking it failed, and the log holds each node once.
    e = env(tmp_path)
    e["TETHER_DATABASE_URL"] = fresh_pg_database

    def cli(*args: str, speed: str = "0") -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "tether", *args],
            cwd=tmp_path,
            env={**e, "TETHER_DEMO_SPEED": speed},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        return proc

    def pg_row(run_id: str) -> dict[str, Any]:
        rows: list[dict[str, Any]] = json.loads(cli("runs", "--json").stdout)
        return next(r for r in rows if r["run_id"] == run_id)

    def completed(run_id: str) -> list[str]:
        shown = json.loads(cli("show", run_id, "--json").stdout)
        return [n["node_id"] for n in shown["nodes"] if n["status"] == "completed"]

    run_id = cli("submit", "demo").stdout.strip()
    worker = subprocess.Popen(
        [sys.executable, "-m", "tether", "worker", "--poll", "0.2"],
        cwd=tmp_path,
        # Slow: the takeover lands mid-run even when each CLI call takes seconds (at speed 3
        # on a loaded machine the run had finished before `resume --force` reached it).
        env={**e, "TETHER_DEMO_SPEED": "8"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while len(completed(run_id)) < 2:
            assert time.monotonic() < deadline, pg_row(run_id)
            assert worker.poll() is None
            time.sleep(0.1)
        r = pg_row(run_id)
        assert r["state"] == "running" and r["owner"], r
        worker_owner = r["owner"]
        forced = cli("resume", run_id, "--force", "--quiet")
        assert f"taking run {run_id} over from {worker_owner}" in " ".join(forced.stdout.split())
        assert "result: " in forced.stdout
    finally:
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, out
    # Whichever notices first stops it: the fence refusing its next append ("fenced off"),
    # or its heartbeat finding the epoch moved on ("lease lost"). Never a failure.
    fenced = f"run {run_id}: fenced off" in out and "'fenced': 1" in out
    # The epoch it lost need not be 1: on a loaded machine its first lease can expire and
    # be claimed again by the same worker before the takeover.
    lost = bool(re.search(rf"run {run_id}: lease lost \(epoch \d+ moved on\)", out))
    lost = lost and "'lost': 1" in out
    assert fenced or lost, out
    assert "execution failed" not in out and "released failed" not in out, out
    assert pg_row(run_id)["status"] == "succeeded"
    ids = completed(run_id)
    assert len(ids) == len(set(ids)) and "root" in ids
    # The log itself, not a view of it: one NodeCompleted per node, whoever wrote it.
    logged = asyncio.run(logged_completions(fresh_pg_database, run_id))
    assert sorted(logged) == sorted(ids)


async def logged_completions(db: str, run_id: str) -> list[str]:
    from tether.model.records import decode_log
    from tether.store import store_from_url

    async with store_from_url(db) as store:
        records = decode_log(run_id, await store.log.read_all(run_id))
    return [r.node_completed.node_id for r in records if r.WhichOneof("body") == "node_completed"]


def test_a_worker_with_an_unusable_blob_directory_says_so_at_start_up(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("not a directory")
    bad = tmp_path / "afile" / "blobs"
    proc = tether(tmp_path, "worker", "--blobs", str(bad), check=False)
    assert proc.returncode == 2, proc
    out = " ".join(proc.stderr.split())
    assert f"blob store directory {bad} cannot be created" in out, out
    assert "ready" not in proc.stdout and "Traceback" not in proc.stderr, proc


def test_a_worker_with_an_unreachable_blob_store_says_so_at_start_up(tmp_path: Path) -> None:
    from tests.s3server import free_port

    url = f"s3://runs/blobs?endpoint=http://127.0.0.1:{free_port()}"  # nothing listens
    e = env(tmp_path)
    e.update(AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="k", AWS_REGION="us-east-1")
    proc = subprocess.run(
        [sys.executable, "-m", "tether", "worker", "--blobs", url],
        cwd=tmp_path,
        env=e,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc
    out = " ".join(proc.stderr.split())
    assert f"blob store '{url}' is not usable" in out and "--blobs" in out, out
    assert "ready" not in proc.stdout, proc


@pytest.mark.parametrize("demo", [False, True])
def test_a_worker_serves_the_demo_model_only_when_asked(tmp_path: Path, demo: bool) -> None:
    # Issue 10: the demo's scripted model server is no part of a production worker.
    e = {k: v for k, v in env(tmp_path).items() if k != "TETHER_DEMO"}
    argv = [sys.executable, "-m", "tether", "worker", *(["--demo"] if demo else [])]
    lines: list[str] = []
    with subprocess.Popen(argv, cwd=tmp_path, env=e, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            for line in proc.stdout:  # until the worker says it is ready (or exits)
                lines.append(line)
                if " ready on " in line:
                    break
            proc.send_signal(signal.SIGTERM)
            lines += proc.stdout.readlines()
            assert proc.wait(timeout=60) == 0, lines
        finally:
            if proc.poll() is None:
                proc.kill()
    said = "".join(lines)
    assert " ready on " in said, said
    assert ("demo runs use the scripted model at http://127.0.0.1:" in said) is demo, said
