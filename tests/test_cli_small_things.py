"""Small things a new user trips over (issue 40): options without help, "1 files checked",
and `--db` refusing a plain path."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tests.test_cli import tether
from tests.test_tlog_check import GOLDEN, check
from tether.cli.app import build_parser


def options_without_help(parser: argparse.ArgumentParser, path: str = "tether") -> list[str]:
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                missing += options_without_help(sub, f"{path} {name}")
        elif action.option_strings and not action.help:
            missing.append(f"{path} {action.option_strings[-1]}")
    return missing


def test_every_option_of_every_command_says_what_it_does() -> None:
    # `demo --question`, `history --json`, `workers --json`, `serve --host`, `--log-level`…
    assert options_without_help(build_parser()) == []


def test_counts_of_one_are_singular(tmp_path: Path) -> None:
    proc = check(tmp_path, "demo", str(GOLDEN / "v1_demo_paused.tlog"))
    lines = proc.stdout.splitlines()
    assert lines[0].endswith(": 2 runs, 2 pending nodes checked"), proc.stdout
    assert lines[-1].startswith("1 file checked against demo "), proc.stdout


def test_db_takes_a_plain_sqlite_path(tmp_path: Path) -> None:
    tether(tmp_path, "--db", "runs.db", "demo", "--quiet")
    assert (tmp_path / "runs.db").is_file() and not (tmp_path / ".tether").exists()
    [run] = [r for r in json.loads(tether(tmp_path, "runs", "--db", "./runs.db", "--json").stdout)
             if not r["parent_run_id"]]  # fmt: skip
    url = f"sqlite:///{tmp_path / 'runs.db'}"  # the same store by its URL
    assert run in json.loads(tether(tmp_path, "runs", "--db", url, "--json").stdout)


def test_db_given_a_directory_means_tether_db_inside_it(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    tether(tmp_path, "--db", "data", "demo", "--quiet")
    assert (tmp_path / "data" / "tether.db").is_file()
    rows = json.loads(tether(tmp_path, "runs", "--db", str(tmp_path / "data"), "--json").stdout)
    assert rows and all(r["status"] == "succeeded" for r in rows)
