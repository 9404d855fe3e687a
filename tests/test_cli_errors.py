"""Every mistake a user can make with a URL, a path, a budget or a run id ends in one line
and a non-zero exit, never a traceback; `--debug` shows the traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tether

SRC = str(Path(tether.__file__).resolve().parent.parent)


def run(home: Path, *args: str, env: dict[str, str] | None = None, code: str = "") -> str:
    """The error a failing command writes: one line on stderr, nothing on stdout."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    e.update(TETHER_DATA_DIR=str(home / ".tether"), PYTHONPATH=SRC, TETHER_DEMO_SPEED="0")
    e.update(env or {})
    argv = [sys.executable, "-c", code + "from tether.cli.app import entry; entry()", *args]
    proc = subprocess.run(argv, cwd=home, env=e, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0, proc.stdout
    assert proc.stdout == "", proc.stdout
    return proc.stderr.strip()


CASES = [
    (("--db", "mysql://x", "runs"), {}, "", "unsupported store URL 'mysql://x'"),
    (("--db", "sqlite:/rel.db", "runs"), {}, "", "unsupported store URL"),
    # Not a URL: a SQLite file's path (issue 40), which a read-only command does not create.
    (("--db", "memory", "runs"), {}, "", "no tether store at memory (sqlite)"),
    (("--db", "postgresql://127.0.0.1:port/test", "runs"), {}, "", "127.0.0.1:port/test"),
    (("--blobs", "s3://", "submit", "demo"), {}, "", "s3://"),
    (("submit", "demo", "--run-id", "has space"), {}, "", "run id"),
    (("submit", "demo", "--input", "{nope"), {}, "", "bad --input: not JSON"),
    (("show", "nope"), {"TETHER_DATA_DIR": "/nonexistent/dir"}, "", "no tether store at "),
    (("show", "nope"), {}, "", "no tether store at "),  # names where it looked
    (("resume", "nope"), {}, "", "unknown run 'nope'"),
    (("demo", "--quiet", "--budget", "nodes=nan"), {}, "", "a finite number >= 0"),
    (("demo", "--quiet", "--budget", "cost=inf"), {}, "", "a finite number >= 0"),
    (("demo", "--quiet", "--budget", "nodes=-3"), {}, "", "a finite number >= 0"),
    (("demo", "--quiet", "--budget", "steps=3"), {}, "", "nodes, tokens, cost, wall, turns"),
    (("demo", "--quiet", "--budget", "nodes"), {}, "", "nodes, tokens, cost, wall, turns"),
    (("demo", "--quiet", "--budget", "tokens=lots"), {}, "", "not a number"),
    (("submit", "demo", "--budget", "wall=-1"), {}, "", "a finite number >= 0"),
    (("demo", "--quiet"), {"TETHER_DATA_DIR": "/proc/tether-nope"}, "", "set TETHER_DATA_DIR"),
    (
        ("--db", "postgresql://127.0.0.1:5432/test", "runs"),
        {},
        "import sys; sys.modules['asyncpg'] = None; ",
        "pip install 'tether[postgres]'",
    ),
]


@pytest.mark.parametrize(("args", "env", "code", "says"), CASES)
def test_a_mistake_ends_in_one_line(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], code: str, says: str
) -> None:
    out = run(tmp_path, *args, env=env, code=code)
    assert says in out
    assert "Traceback" not in out
    assert len(out.splitlines()) == 1, out


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    out = run(tmp_path, "--debug", "--db", "mysql://x", "runs")
    assert "Traceback" in out and "unsupported store URL" in out


def test_version(tmp_path: Path) -> None:
    e = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.run(
        [sys.executable, "-m", "tether", "--version"], capture_output=True, text=True, env=e
    )
    assert proc.returncode == 0 and proc.stdout.startswith("tether ")
