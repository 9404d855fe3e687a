"""The README's Python example runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"


def test_readme_python_example_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "the README has no Python example"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    for code in blocks:
        proc = subprocess.run(
            [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        assert "succeeded" in proc.stdout


def test_the_offline_testing_guide_runs_as_written(tmp_path: Path) -> None:
    guide = Path(__file__).parent.parent / "docs/guides/testing.md"
    (code,) = re.findall(r"```python\n(.*?)```", guide.read_text(), re.S)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    proc = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr


def test_the_old_name_of_tether_testing_still_imports_with_a_warning() -> None:
    import importlib
    import sys as _sys

    import pytest

    _sys.modules.pop("tether.agent.localserver", None)
    with pytest.warns(DeprecationWarning, match="tether.testing"):
        old = importlib.import_module("tether.agent.localserver")
    import tether.testing

    assert old.serve_local_models is tether.testing.serve_local_models
