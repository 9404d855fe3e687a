"""`tether export` and `tether import` as a user runs them (issue 13): real processes."""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_cli import run_ids, tether


def test_export_then_import_into_another_store_twice_and_a_truncated_file(
    tmp_path: Path,
) -> None:
    tether(tmp_path, "demo", "--quiet", "--budget", "nodes=8")
    (run,) = run_ids(tmp_path)
    run_id = str(run["run_id"])
    out = tmp_path / "run.tlog"
    said = tether(tmp_path, "export", run_id, "-o", str(out), "--with-blobs").stdout
    assert said.strip() == f"exported run {run_id} to {out}"
    assert not (tmp_path / "run.tlog.part").exists()

    other = ["--db", f"sqlite:///{tmp_path / 'other.db'}", "--blobs", str(tmp_path / "b2")]
    first = tether(tmp_path, *other, "import", str(out)).stdout
    assert first.startswith(f"imported run {run_id}: 2 runs, ")  # with its sub-agent run
    second = tether(tmp_path, *other, "import", str(out)).stdout
    assert second.strip() == f"run {run_id}: already in this store; nothing imported"
    listed = json.loads(tether(tmp_path, *other, "runs", "--json").stdout)
    assert sorted((r["run_id"], r["status"]) for r in listed if not r["parent_run_id"]) == [
        (run_id, "paused")
    ]
    # The imported run continues in its new store to an answer.
    resumed = tether(tmp_path, *other, "resume", run_id, "--quiet", "--budget", "nodes=+50")
    assert "status: succeeded" in resumed.stdout

    cut = tmp_path / "cut.tlog"
    cut.write_bytes(out.read_bytes()[:-100])
    third = ["--db", f"sqlite:///{tmp_path / 'third.db'}"]
    refused = tether(tmp_path, *third, "import", str(cut), check=False)
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"error: {cut}: not imported: truncated")
    assert json.loads(tether(tmp_path, *third, "runs", "--json").stdout) == []

    unknown = tether(tmp_path, "export", "nope", "-o", str(tmp_path / "x.tlog"), check=False)
    assert unknown.returncode == 2 and "unknown run 'nope'" in unknown.stderr
    assert not (tmp_path / "x.tlog").exists()
