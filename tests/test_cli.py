"""The `tether` command as a user runs it: real processes, real signals, the embedded default."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tether as tether_pkg

ANSWER = re.compile(r"result: (Answer to .*)")


def tether(
    home: Path, *args: str, check: bool = True, **kw: object
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=home,
        env=env(home),
        capture_output=True,
        text=True,
        timeout=120,
        **kw,  # type: ignore[call-overload]
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"tether {args} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc  # type: ignore[no-any-return]


def env(home: Path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    e.update(TETHER_DATA_DIR=str(home / ".tether"), COLUMNS="250", TETHER_DEMO_SPEED="0")
    e["TETHER_DEMO"] = "1"  # workers and servers serve the demo's scripted model (--demo)
    # The subprocess runs this tether (a worktree's or an installed one), from any cwd.
    e["PYTHONPATH"] = str(Path(tether_pkg.__file__).resolve().parent.parent)
    return e


def answer(out: str) -> str:
    m = ANSWER.search(out)
    assert m, out
    return m.group(1)


def run_ids(home: Path) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = json.loads(tether(home, "runs", "--json").stdout)
    return [r for r in rows if not r["parent_run_id"]]


def test_demo_runs_to_a_final_answer(tmp_path: Path) -> None:
    out = tether(tmp_path, "demo", "--quiet").stdout
    assert "status: succeeded" in out
    assert "agent " in out and "joins 4" in out
    # The report step attached its chart: the record holds (url, size, sha256).
    chart = next(line for line in out.splitlines() if "attached image/png" in line)
    assert " B sha256 " in chart and "file://" in out
    assert f"log: sqlite:///{tmp_path / '.tether' / 'tether.db'}" in out.replace("\n", "")
    assert answer(out).startswith("Answer to 'How do agents survive a rolling deploy?'")
    # Costs print rounded to four decimals (the demo's usage has more).
    assert re.search(r"budget: nodes 10, tokens \d+, cost \$0\.\d{4}, wall ", out), out


def test_stop_after_then_resume_gives_the_same_answer(tmp_path: Path) -> None:
    reference = answer(tether(tmp_path, "demo", "--quiet").stdout)
    killed = tether(tmp_path, "demo", "--quiet", "--stop-after", "5", check=False)
    assert killed.returncode == -signal.SIGKILL
    run = run_ids(tmp_path)[0]
    assert run["status"] == "running"  # nobody paused it: it died
    shown = json.loads(tether(tmp_path, "show", str(run["run_id"]), "--json").stdout)
    assert shown["budget"]["used"]["nodes"] == 5
    # Its lease (5 s by default) may still be live: wait for it, then take the run.
    resumed = tether(tmp_path, "resume", str(run["run_id"]), "--wait", "--quiet").stdout
    assert answer(resumed) == reference
    shown = json.loads(tether(tmp_path, "show", str(run["run_id"]), "--json").stdout)
    assert shown["status"] == "succeeded"
    ids = [n["node_id"] for n in shown["nodes"]]
    assert len(ids) == len(set(ids)) == 10


def started_demo(home: Path, *args: str, speed: float = 1) -> tuple[subprocess.Popen[str], str]:
    """`tether demo ARGS` with model turns that take a while, once its run has started."""
    e = env(home)
    e["TETHER_DEMO_SPEED"] = str(speed)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "demo", *args],
        cwd=home,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:  # readiness is a handshake: the run announces itself
        if line.startswith("run ") and line.strip().endswith("started"):
            return proc, line.split()[1]
    raise AssertionError(f"the demo never started: {proc.communicate()}")


def test_sigterm_drains_and_resume_finishes(tmp_path: Path) -> None:
    reference = answer(tether(tmp_path, "demo", "--quiet").stdout)
    # Paced so the run is far from its last turn when the drain comes (~7 s of sleeps
    # after the first node): each poll below starts a process, slow on a loaded host.
    proc, run_id = started_demo(tmp_path, "--quiet", speed=3)
    # Wait until the first node is durably recorded, then ask for a drain.
    deadline = time.monotonic() + 60
    while (
        json.loads(tether(tmp_path, "show", run_id, "--json").stdout)["budget"]["used"]["nodes"] < 1
    ):
        assert proc.poll() is None, "the run ended before its first node was recorded"
        assert time.monotonic() < deadline, "the first node was not recorded within 60 s"
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "status: paused (drain)" in out
    assert f"resume with: tether resume {run_id}" in out
    assert answer(tether(tmp_path, "resume", run_id, "--quiet").stdout) == reference


def test_ctrl_c_says_what_it_drains_and_a_second_stops_now_without_tracebacks(
    tmp_path: Path,
) -> None:
    # The first turn (~1.5 s at speed 3) is still in flight when the second Ctrl-C comes.
    proc, run_id = started_demo(tmp_path, "--grace", "60", speed=3)
    assert proc.stdout is not None
    proc.send_signal(signal.SIGINT)
    said = ""
    for line in proc.stdout:
        said += line
        if line.startswith("draining:"):
            break
    draining = re.search(r"draining: (\d+) nodes in flight, up to 60 s; Ctrl-C again", said)
    assert draining is not None, said
    assert int(draining.group(1)) >= 1  # the first model turn
    proc.send_signal(signal.SIGINT)  # within the 60 s of grace: stop now
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "stopping now" in out and "status: paused (drain)" in out
    assert "Traceback" not in out + err and "Error" not in err, err
    # What was cut runs again on resume: nothing is lost.
    assert "status: succeeded" in tether(tmp_path, "resume", run_id, "--quiet").stdout


def test_show_json_is_stable(tmp_path: Path) -> None:
    tether(tmp_path, "demo", "--quiet")
    run_id = str(run_ids(tmp_path)[0]["run_id"])
    view = json.loads(tether(tmp_path, "show", run_id, "--json", "--outputs").stdout)
    assert set(view) == {
        "format", "run_id", "agent", "agent_version", "status", "reason", "parent_run_id",
        "forked_from", "records", "budget", "result", "waits", "nodes", "state", "lease_left",
        "retries",
        "at_seq",
    }  # fmt: skip
    assert view["at_seq"] is None  # the run as it is now (docs/reference/show-json.md)
    assert view["format"] == 1
    assert set(view["budget"]) == {"limits", "used"}
    node = view["nodes"][0]
    expected = {"node_id", "kind", "parent_ids", "status", "attempt", "wall_ms", "tokens_in",
                "tokens_out", "cost", "started_at_us", "finished_at_us", "output"}  # fmt: skip
    assert expected <= set(node)
    assert node["kind"] == "turn" and node["status"] == "completed"


def test_budget_pause_and_resume_with_more(tmp_path: Path) -> None:
    paused = tether(tmp_path, "demo", "--quiet", "--budget", "nodes=3").stdout
    assert "status: paused (budget: node limit 3 reached)" in paused
    run_id = str(run_ids(tmp_path)[0]["run_id"])
    assert "budget: nodes 3/3" in paused  # never more than 3, whatever was in flight
    # Not raised: said in one line on stderr, non-zero, and nothing runs.
    for same in ((), ("--budget", "nodes=+0"), ("--budget", "tokens=+100")):
        refused = tether(tmp_path, "resume", run_id, "--quiet", *same, check=False)
        assert refused.returncode == 2, refused
        assert refused.stdout == "" and len(refused.stderr.splitlines()) == 1, refused
        assert "paused by its budget (node limit 3 reached)" in refused.stderr
        assert "--budget nodes=+N" in refused.stderr
        # Taken while it was read, then given back: paused still, nobody's, same reason.
        row = next(r for r in run_ids(tmp_path) if r["run_id"] == run_id)
        assert (row["status"], row["owner"], row["lease_until"]) == ("paused", None, None)
        assert row["reason"] == "budget: node limit 3 reached"
    done = tether(tmp_path, "resume", run_id, "--quiet", "--budget", "nodes=+20").stdout
    assert "status: succeeded" in done
    view = json.loads(tether(tmp_path, "show", run_id, "--json").stdout)
    assert view["budget"]["limits"]["max_nodes"] == 23


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("show", "nope"), "unknown run 'nope'"),
        (("resume", "nope"), "unknown run 'nope'"),
        (("--db", "mysql://x", "runs"), "unsupported store URL"),
        (("runs", "--db", "mysql://x"), "unsupported store URL"),  # after the subcommand
    ],
)
def test_bad_input_gets_a_clear_error(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    tether(tmp_path, "db", "migrate")  # a store exists: read-only commands find it
    proc = tether(tmp_path, *args, check=False)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr


def test_db_migrate_applies_then_is_idempotent(tmp_path: Path) -> None:
    assert "applied 0001_initial.sql" in tether(tmp_path, "db", "migrate").stdout
    assert "up to date" in tether(tmp_path, "db", "migrate").stdout


def test_db_migrate_on_postgres(tmp_path: Path, empty_pg_database: str) -> None:
    first = tether(tmp_path, "--db", empty_pg_database, "db", "migrate").stdout
    assert "applied 0001_initial.sql" in first
    assert "up to date" in tether(tmp_path, "--db", empty_pg_database, "db", "migrate").stdout


@pytest.mark.parametrize(
    "args", [("runs",), ("runs", "--json"), ("show", "nope"), ("blobs", "verify", "nope")]
)
def test_read_only_commands_against_an_empty_directory_create_nothing(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    proc = tether(tmp_path, *args, check=False)
    assert proc.returncode == 2
    out = " ".join((proc.stdout + proc.stderr).split())
    assert f"no tether store at {tmp_path / '.tether' / 'tether.db'}" in out
    assert "tether db migrate" in out  # what to run
    assert list(tmp_path.iterdir()) == []  # no database file, no directory, no blobs


def test_read_only_commands_against_an_unmigrated_store_say_what_to_run(tmp_path: Path) -> None:
    import sqlite3

    (tmp_path / ".tether").mkdir()
    sqlite3.connect(tmp_path / ".tether" / "tether.db").close()  # an empty file: no schema
    proc = tether(tmp_path, "runs", check=False)
    assert proc.returncode == 2
    said = proc.stdout + proc.stderr
    assert "lacks migrations" in said and "tether db migrate" in said
    tables = sqlite3.connect(tmp_path / ".tether" / "tether.db").execute(
        "SELECT name FROM sqlite_master"
    )
    assert tables.fetchall() == []  # nothing was created


def test_global_options_work_after_the_subcommand(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'other.db'}"
    tether(tmp_path, "db", "migrate", "--db", db)
    tether(tmp_path, "--db", db, "submit", "demo")
    after = json.loads(tether(tmp_path, "runs", "--json", "--db", db).stdout)
    before = json.loads(tether(tmp_path, "--db", db, "runs", "--json").stdout)
    assert len(after) == len(before) == 1


def test_runs_fits_80_columns_nests_sub_agent_runs_and_filters(tmp_path: Path) -> None:
    tether(tmp_path, "demo", "--quiet")  # its analyst is a sub-agent run
    tether(tmp_path, "demo", "--quiet", "--budget", "nodes=3")
    e = {**env(tmp_path), "COLUMNS": "80"}
    table = subprocess.run(
        [sys.executable, "-m", "tether", "runs"],
        cwd=tmp_path, env=e, capture_output=True, text=True, timeout=120, check=True,
    ).stdout.splitlines()  # fmt: skip
    assert all(len(line) <= 80 for line in table), table
    assert table[0].split() == ["run", "id", "agent", "state", "age", "owner", "reason"]
    rows = json.loads(tether(tmp_path, "runs", "--json").stdout)
    parent = next(r for r in rows if r["agent"] == "demo" and r["status"] == "succeeded")
    child = next(r for r in rows if r["parent_run_id"] == parent["run_id"])
    at = next(i for i, line in enumerate(table) if line.startswith(str(parent["run_id"])))
    # The child right under its parent, by the part of its id after the parent's.
    suffix = str(child["run_id"])[len(str(parent["run_id"])) :]
    assert table[at + 1].startswith(f"└ {suffix}") and "demo.analyst" in table[at + 1]
    assert re.search(r"\s\d+[smhd]\s", table[at])  # its age
    only = json.loads(tether(tmp_path, "runs", "--agent", "demo.analyst", "--json").stdout)
    assert [r["run_id"] for r in only] == [child["run_id"]]
    paused = json.loads(tether(tmp_path, "runs", "--status", "paused", "--json").stdout)
    assert [r["reason"] for r in paused] == ["budget: node limit 3 reached"]


def test_logs_prints_each_record_on_one_line_and_follow_ends_with_the_run(
    tmp_path: Path,
) -> None:
    proc, run_id = started_demo(tmp_path, "--quiet")
    follow = subprocess.run(
        [sys.executable, "-m", "tether", "logs", run_id, "--follow"],
        cwd=tmp_path, env=env(tmp_path), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert follow.returncode == 0, follow.stderr
    proc.communicate(timeout=60)
    lines = follow.stdout.splitlines()
    records = json.loads(tether(tmp_path, "show", run_id, "--json").stdout)["records"]
    assert len(lines) == records  # every record once, in order, and it ended by itself
    assert [int(line.split()[0]) for line in lines] == list(range(records))
    assert " started demo input " in lines[0]
    assert " finished succeeded -> " in lines[-1]
    assert any(" completed tool:report " in line and "blob(s)" in line for line in lines)
    again = tether(tmp_path, "logs", run_id).stdout.splitlines()
    assert again == lines
    as_json = tether(tmp_path, "logs", run_id, "--json").stdout.splitlines()
    assert [json.loads(line)["seq"] for line in as_json] == list(range(records))
