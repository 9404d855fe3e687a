"""The documented imports work, and the top level of the package is its public API only."""

from __future__ import annotations

import importlib
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

import tether

SRC = Path(tether.__file__).parent

DOCUMENTED = [
    "tether",
    "tether.agent",
    "tether.testing",
    "tether.store",
    "tether.store.sqlite",
    "tether.store.postgres",
    "tether.store.memory",
    "tether.client",
    "tether.integrations.pydantic_ai",
    "tether.integrations.openai_agents",
    "tether.agent.mcp",
    "tether.cli",
]


@pytest.mark.parametrize("module", DOCUMENTED)
def test_a_documented_import_works(module: str) -> None:
    # In a fresh interpreter: an import that works only after others is caught.
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True)
    assert done.returncode == 0, done.stderr.decode()


def test_the_public_names_come_from_tether() -> None:
    for name in ("Runtime", "Registry", "NodeResult", "Spawn", "Wait", "Status", "store_from_url"):
        assert getattr(tether, name) is not None


def test_the_tether_command_resolves_to_the_cli() -> None:
    (script,) = [ep for ep in entry_points(group="console_scripts") if ep.name == "tether"]
    assert script.value == "tether.cli:entry"
    assert callable(script.load())
    assert importlib.import_module("tether.cli").entry is script.load()


def test_the_top_level_holds_at_most_12_modules() -> None:
    modules = sorted(p.name for p in SRC.glob("*.py"))
    assert len(modules) <= 12, modules
    assert "inspect.py" not in modules  # it shadowed the standard library
