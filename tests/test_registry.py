"""Agents are found by name through the `tether.agents` entry points, tether's demo too."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import tether

SRC = str(Path(tether.__file__).resolve().parent.parent)


def test_the_demo_agents_are_tether_agents_entry_points() -> None:
    found = {ep.name: ep.value for ep in entry_points(group="tether.agents")}
    assert found["demo"] == "tether.demo.agent:agent"
    assert found["demo.analyst"] == "tether.demo.agent:agent"


def test_a_fresh_process_resolves_the_demo_through_its_entry_point() -> None:
    # Nothing imported the demo yet: only the entry point can say where it lives.
    code = (
        "import sys\n"
        "from tether.engine.registry import resolve_agent\n"
        "assert 'tether.demo.agent' not in sys.modules\n"
        "print(resolve_agent('demo').name, resolve_agent('demo.analyst').name)\n"
    )
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["demo", "demo.analyst"]


def test_the_registry_has_no_special_case_for_the_demo() -> None:
    source = (Path(SRC) / "tether/engine/registry.py").read_text()
    assert "tether.demo" not in source
