"""The `tether` console script's process: what `entry` does before the command runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tether

SRC = str(Path(tether.__file__).resolve().parent.parent)


def test_entry_keeps_the_collector_off_what_was_imported() -> None:
    # The command sees every module imported by then frozen (gc.freeze): a fresh process's
    # first full collections do not walk them (`tether resume`'s window, issue 12).
    code = (
        "import gc\n"
        "from tether.cli import app as cli\n"
        "cli.main = lambda: print(gc.get_freeze_count(), flush=True) or 0\n"
        "cli.entry()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": SRC},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert int(proc.stdout) > 10_000, proc.stdout  # tether.cli.app's imports, at least
