"""`tether history` and `tether fork` as a user runs them (issue 13): real processes."""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_cli import answer, run_ids, tether


def history(home: Path, run_id: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = json.loads(tether(home, "history", run_id, "--json").stdout)
    return rows


def test_history_lists_checkpoints_and_a_fork_runs_to_the_same_answer(tmp_path: Path) -> None:
    source_answer = answer(tether(tmp_path, "demo", "--quiet").stdout)
    (source,) = run_ids(tmp_path)
    steps = history(tmp_path, str(source["run_id"]))
    assert [s["seq"] for s in steps] == list(range(len(steps)))
    assert steps[0]["kind"] == "run_started" and steps[-1]["kind"] == "run_finished"
    assert any(s["kind"] == "node_completed" and s["node_id"] for s in steps)
    table = tether(tmp_path, "history", str(source["run_id"])).stdout
    assert "node_completed" in table and f"tether fork {source['run_id']} --at SEQ" in table

    out = tether(tmp_path, "fork", str(source["run_id"]), "--at", "1", "--run", "--quiet").stdout
    fork_id = out.splitlines()[0].strip()
    assert answer(out) == source_answer
    fork_steps = history(tmp_path, fork_id)
    assert f"forked from {source['run_id']} at seq 1" in str(fork_steps[0]["note"])
    assert fork_steps[1] == steps[1]
    done = [s["node_id"] for s in fork_steps if s["kind"] == "node_completed"]
    assert len(done) == len(set(done))


def test_fork_queues_by_default_and_sets_an_output(tmp_path: Path) -> None:
    tether(tmp_path, "demo", "--quiet")
    (source,) = run_ids(tmp_path)
    steps = history(tmp_path, str(source["run_id"]))
    node = next(s["node_id"] for s in steps if s["kind"] == "node_completed")
    out = tether(
        tmp_path, "fork", str(source["run_id"]), "--at", "1", "--set", f'{node}={{"x": 1}}'
    )
    fork_id = out.stdout.strip()
    rows = {r["run_id"]: r for r in run_ids(tmp_path)}
    assert rows[fork_id]["status"] == "queued"
    shown = json.loads(tether(tmp_path, "show", fork_id, "--json", "--outputs").stdout)
    (view,) = [n for n in shown["nodes"] if n["node_id"] == node]
    assert view["output"] == {"x": 1}


def test_bad_fork_input_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    tether(tmp_path, "demo", "--quiet")
    (source,) = run_ids(tmp_path)
    rid = str(source["run_id"])
    past = tether(tmp_path, "fork", rid, "--at", "9999", check=False)
    assert past.returncode == 2 and "cannot fork at seq 9999" in past.stderr
    bad_json = tether(tmp_path, "fork", rid, "--at", "1", "--set", "root={nope", check=False)
    assert bad_json.returncode != 0 and "the value is not JSON" in bad_json.stderr
    unknown = tether(tmp_path, "fork", rid, "--before", "ghost", check=False)
    assert unknown.returncode == 2 and "has no node ghost" in unknown.stderr
    neither = tether(tmp_path, "fork", rid, check=False)
    assert neither.returncode == 2 and "--at" in neither.stderr
    missing = tether(tmp_path, "history", "no-such-run", check=False)
    assert missing.returncode == 2 and "no-such-run" in missing.stderr
    assert [r["run_id"] for r in run_ids(tmp_path)] == [rid]


def test_runs_show_lineage_and_a_pending_input_can_be_set(tmp_path: Path) -> None:
    tether(tmp_path, "demo", "--quiet")
    (source,) = run_ids(tmp_path)
    rid = str(source["run_id"])
    first = tether(tmp_path, "fork", rid, "--at", "1").stdout.strip()
    shown = json.loads(tether(tmp_path, "show", first, "--json").stdout)
    pending = next(n["node_id"] for n in shown["nodes"] if n["status"] == "ready")
    done = next(n["node_id"] for n in shown["nodes"] if n["status"] == "completed")
    second = tether(tmp_path, "fork", rid, "--at", "1", "--input", f"{pending}=[1, 2]")
    fork_id = second.stdout.strip()
    shown = json.loads(tether(tmp_path, "show", fork_id, "--json").stdout)
    assert shown["forked_from"]["overridden_node_ids"] == [pending]
    rows = {r["run_id"]: r for r in run_ids(tmp_path)}
    assert rows[fork_id]["forked_from"] == {"run_id": rid, "seq": 1}
    assert rows[rid]["forked_from"] is None
    table = tether(tmp_path, "runs").stdout
    assert "forked from" in table and f"{rid}@1" in table.replace("\n", "").replace("│", "")
    refused = tether(tmp_path, "fork", rid, "--at", "1", "--input", f"{done}=1", check=False)
    assert refused.returncode == 2 and "already recorded at seq 1" in refused.stderr
    bad = tether(tmp_path, "fork", rid, "--at", "1", "--input", "x", check=False)
    assert bad.returncode != 0 and "bad --input 'x'" in bad.stderr
    assert len(run_ids(tmp_path)) == 3


def test_show_at_a_seq_is_the_run_as_it_was_then(tmp_path: Path) -> None:
    tether(tmp_path, "demo", "--quiet")
    (source,) = run_ids(tmp_path)
    rid = str(source["run_id"])
    now = json.loads(tether(tmp_path, "show", rid, "--json", "--outputs").stdout)
    then = json.loads(tether(tmp_path, "show", rid, "--json", "--at", "1", "--outputs").stdout)
    assert (then["at_seq"], then["records"], then["status"]) == (1, 2, "running")
    assert [n["status"] for n in then["nodes"]].count("completed") == 1
    assert then["budget"]["used"]["nodes"] == 1 < now["budget"]["used"]["nodes"]
    assert then["nodes"][0]["output"] == now["nodes"][0]["output"]  # the root's, recorded then
    table = tether(tmp_path, "show", rid, "--at", "1").stdout
    assert "as of seq 1" in table
    past = tether(tmp_path, "show", rid, "--at", "9999", check=False)
    assert past.returncode == 2 and "there is no seq 9999" in past.stdout + past.stderr


def test_a_relative_fork_budget_counts_from_the_fork_point(tmp_path: Path) -> None:
    tether(tmp_path, "demo", "--quiet")
    (source,) = run_ids(tmp_path)
    rid = str(source["run_id"])
    now = json.loads(tether(tmp_path, "show", rid, "--json").stdout)["budget"]
    then = json.loads(tether(tmp_path, "show", rid, "--json", "--at", "1").stdout)["budget"]
    assert then["used"]["nodes"] < now["used"]["nodes"]
    out = tether(tmp_path, "fork", rid, "--at", "1", "--budget", "nodes=+1,cost=3").stdout
    fork_id = out.splitlines()[0].strip()
    limits = json.loads(tether(tmp_path, "show", fork_id, "--json").stdout)["budget"]["limits"]
    assert limits["max_nodes"] == then["used"]["nodes"] + 1  # not the source's usage now + 1
    assert limits["max_cost"] == 3
    assert limits["max_tokens"] == then["limits"]["max_tokens"]  # kept from the fork point
    bad = tether(tmp_path, "fork", rid, "--at", "1", "--budget", "nodes=+x", check=False)
    assert bad.returncode != 0 and "bad --budget value in 'nodes=+x'" in bad.stderr
    assert len(run_ids(tmp_path)) == 2
