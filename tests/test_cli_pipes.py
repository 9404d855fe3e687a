"""A closed stdout ends any command quietly with exit 0, as `git log | head` does (issue 40):
real pipes whose reader went away before or while the command writes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_cli import env, tether


def closed_early(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run `tether ARGS` writing into a pipe whose only reader closes it before reading."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone: the command's first write meets a broken pipe
    try:
        return subprocess.run(
            [sys.executable, "-m", "tether", *args],
            cwd=home,
            env=env(home),
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("pipes")
    tether(home, "demo", "--quiet")
    return home


def run_id(home: Path) -> str:
    return tether(home, "runs", "--json").stdout.split('"run_id": "')[1].split('"')[0]


@pytest.mark.parametrize(
    "command",
    [
        ["logs", "RID"],
        ["logs", "RID", "--json"],
        ["show", "RID"],
        ["history", "RID"],
        ["runs"],
        ["runs", "--json"],
        ["runs", "prune", "--finished-before", "30d", "--dry-run", "--list"],
        ["workers"],
        ["--help"],
    ],
)
def test_a_closed_stdout_ends_the_command_quietly(home: Path, command: list[str]) -> None:
    rid = run_id(home)
    proc = closed_early(home, *[rid if a == "RID" else a for a in command])
    assert (proc.returncode, proc.stderr) == (0, "")


def test_head_takes_the_first_line_and_the_command_exits_0(home: Path) -> None:
    # As a user types it: `tether logs RID | head -1` in a shell with pipefail, so the
    # pipeline's status is tether's own.
    cmd = f"set -o pipefail; {sys.executable} -m tether logs {run_id(home)} | head -1"
    proc = subprocess.run(
        ["bash", "-c", cmd], cwd=home, env=env(home), capture_output=True, text=True, timeout=120
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    assert len(proc.stdout.splitlines()) == 1
