"""The examples in examples/ run as the README says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"


def test_research_agent_example_runs_and_a_rerun_replays_the_same_transcript(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "research_agent.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert ": succeeded" in proc.stdout
    assert "-> ['search_papers', 'search_papers', 'search_papers']" in proc.stdout
    assert "is cited most" in proc.stdout
    run_id = proc.stdout.split("\nrun ")[1].split(":")[0]
    assert proc.stdout.startswith(f"run {run_id} started")  # as its docstring promises
    # Run again with the run id: it is finished, so nothing runs and the transcript is the same.
    again = subprocess.run(
        [sys.executable, str(EXAMPLES / "research_agent.py"), run_id],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.split("\nrun ")[1] == proc.stdout.split("\nrun ")[1]


def _run_example(name: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "OPENAI_"))}
    env["TETHER_DATABASE_URL"] = f"sqlite:///{tmp_path}/examples.db"
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_pydantic_ai_example_runs_with_one_command(tmp_path: Path) -> None:
    pytest.importorskip("pydantic_ai")
    proc = _run_example("pydantic_ai_agent.py", tmp_path, "What is WAL?")
    assert proc.returncode == 0, proc.stderr
    run_id = proc.stdout.split()[1]
    assert f"run {run_id}: succeeded" in proc.stdout
    assert "I read 2 search results" in proc.stdout


def test_mcp_example_runs_with_a_local_mcp_server(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    proc = _run_example("mcp_agent.py", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "In stock: bolts: 120 in stock; washers: 0 in stock" in proc.stdout


def test_openai_agents_example_runs_with_one_command(tmp_path: Path) -> None:
    pytest.importorskip("agents")
    proc = _run_example("openai_agents_agent.py", tmp_path, "What is WAL?")
    assert proc.returncode == 0, proc.stderr
    run_id = proc.stdout.split()[1]
    assert f"run {run_id}: succeeded" in proc.stdout
    assert "I read 2 search results" in proc.stdout


def test_openai_agents_approval_example_approves_in_one_command(tmp_path: Path) -> None:
    pytest.importorskip("agents")
    proc = _run_example("openai_agents_approval.py", tmp_path, "What is WAL?", "--yes")
    assert proc.returncode == 0, proc.stderr
    run_id = proc.stdout.split()[1]
    assert proc.stdout.count("approve? search") == 2
    assert f"run {run_id}: succeeded" in proc.stdout
    assert "I read 2 search results" in proc.stdout
