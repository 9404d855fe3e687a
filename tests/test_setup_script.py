"""scripts/test.sh says what it would install, skips what is there already, and on a system
without apt-get stops with a clear message before running anything (issue 18's set-up
friction). Run in a sandbox checkout whose PATH holds only the tools the script uses first:
no chromium, no apt-get, no npm."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_without_chromium_or_apt_it_says_what_to_install_and_stops(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "test.sh", repo / "scripts" / "test.sh")
    (repo / "pyproject.toml").write_text("[project]\nname = 'sandbox'\n")
    # This checkout's tether is "installed" (the stamp matches, python3 imports it from
    # here): the script must skip pip and say so.
    (repo / "src" / "tether").mkdir(parents=True)
    (repo / "src" / "tether" / "__init__.py").write_text("")
    digest = hashlib.sha256((repo / "pyproject.toml").read_bytes()).hexdigest()
    (repo / ".cache").mkdir()
    (repo / ".cache" / "pip-installed").write_text(f"{repo} {digest}\n")
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "python3").symlink_to(sys.executable)
    for name in ("sha256sum", "cut", "cat", "dirname"):
        found = shutil.which(name)
        assert found is not None, name
        (tools / name).symlink_to(found)
    env = {"PATH": str(tools), "PYTHONPATH": str(repo / "src"), "HOME": str(tmp_path)}
    bash = shutil.which("bash")
    assert bash is not None
    proc = subprocess.run(
        [bash, "scripts/test.sh"], cwd=repo, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1, proc
    assert proc.stdout.splitlines() == [
        "tether[dev,docs] is installed for this pyproject.toml already "
        "(rm .cache/pip-installed to reinstall)"
    ]
    assert proc.stderr.splitlines() == [
        "scripts/test.sh: chromium is missing and this system has no apt-get; install it yourself",
        "  (Debian/Ubuntu packages chromium and chromium-driver), then run scripts/test.sh again",
    ]
    assert sorted(os.listdir(repo)) == [".cache", "pyproject.toml", "scripts", "src"]
