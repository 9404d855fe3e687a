"""The replay check (issue 13): `tether check AGENT FILE_OR_DIR...` on saved `.tlog` files,
the golden ones included, as a CI job runs it before a deploy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests import tlog_agents
from tests.test_cli import env
from tether import Runtime, export_run, store_from_url
from tether.blobs import LocalBlobStore
from tether.model.records import decode_log
from tether.ops.tlog import check_file

ROOT = Path(__file__).parent.parent
GOLDEN = ROOT / "tests" / "golden"


def check(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", "check", *args],
        cwd=ROOT,  # agents given as tests.module:attribute import from here
        env=env(home),
        capture_output=True,
        text=True,
        timeout=120,
    )


async def saved(path: Path, input: object) -> Path:
    """A queued run of release 1 (its root `plan` pending) saved as a .tlog file."""
    async with store_from_url("memory:") as store:
        run_id = await Runtime(store).submit(tlog_agents.v1, input)
        data = b"".join([c async for c in export_run(store, run_id)])
    path.write_bytes(data)  # noqa: ASYNC240 (a test's small file)
    return path


def test_the_golden_logs_pass_the_check_with_the_code_here(tmp_path: Path) -> None:
    goldens = sorted(GOLDEN.glob("*.tlog"))
    assert goldens, "tests/golden holds .tlog files (tests/golden/write_tlog.py writes them)"
    proc = check(tmp_path, "demo", str(GOLDEN))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for golden in goldens:
        assert any(line.startswith(f"ok   {golden}: ") for line in lines), proc.stdout
    files = f"{len(goldens)} file" + ("" if len(goldens) == 1 else "s")
    assert lines[-1].startswith(f"{files} checked against demo ")
    assert lines[-1].endswith(", 0 failed")


async def test_a_renamed_kind_and_an_input_that_no_longer_fits_fail(tmp_path: Path) -> None:
    fits = await saved(tmp_path / "fits.tlog", {"q": "what?"})
    number = await saved(tmp_path / "number.tlog", {"q": 7})
    assert (await check_file(tlog_agents.v1, fits)).ok
    assert (await check_file(tlog_agents.v3, fits)).ok

    renamed = await check_file(tlog_agents.v2, fits)
    [problem] = renamed.problems
    assert (problem.what, problem.node_id) == ("kind", "root")
    assert "has no handler for pending node kind 'plan'" in problem.detail

    [problem] = (await check_file(tlog_agents.v3, number)).problems
    assert problem.what == "input" and "node root (plan)" in problem.detail


async def test_the_command_reports_one_line_per_file_and_fails_on_any(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    good = await saved(logs / "a.tlog", {"q": "what?"})
    (logs / "b.tlog").write_bytes(good.read_bytes()[:-10])  # truncated
    ok = check(tmp_path, "tests.tlog_agents:v1", str(good))
    assert ok.returncode == 0 and ok.stdout.startswith(f"ok   {good}: 1 run, 1 pending")

    proc = check(tmp_path, "tests.tlog_agents:v2", str(logs), str(GOLDEN))
    assert proc.returncode == 1
    out = proc.stdout.splitlines()
    assert out[0] == f"FAIL {good}: 1 problem"
    assert "no handler for pending node kind 'plan'" in out[1] and out[1].startswith("  run ")
    assert out[2].startswith(f"FAIL {logs / 'b.tlog'}: does not decode: truncated")
    golden = next(line for line in out if "v1_demo_paused" in line)
    assert golden.startswith("FAIL")  # a demo run is not a run of this agent
    assert "a run of agent 'demo', not 'test.tlog.agent'" in proc.stdout

    missing = check(tmp_path, "tests.tlog_agents:v1", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "nowhere: no such file or directory" in missing.stderr


async def test_a_pending_input_kept_in_a_blob_is_checked_when_the_file_holds_it(
    tmp_path: Path,
) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    async with store_from_url("memory:") as store:
        rt = Runtime(store, blobs=blobs, offload_threshold=50)
        run_id = await rt.submit(tlog_agents.v1, {"q": 7, "pad": "x" * 200})
        records = decode_log(run_id, await store.log.read_all(run_id))
        assert records[0].run_started.roots[0].input.WhichOneof("kind") == "blob"
        with_blobs = b"".join([c async for c in export_run(store, run_id, blobs=blobs)])
        without = b"".join([c async for c in export_run(store, run_id)])
    (tmp_path / "with.tlog").write_bytes(with_blobs)
    (tmp_path / "without.tlog").write_bytes(without)
    [problem] = (await check_file(tlog_agents.v3, tmp_path / "with.tlog")).problems
    assert problem.what == "input" and "node root (plan)" in problem.detail
    # Without its blobs the file cannot say what the input is: that input is not checked.
    assert (await check_file(tlog_agents.v3, tmp_path / "without.tlog")).ok
