"""Without its extra, `tether.client` says which extra to install."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_client_without_httpx_names_the_extra() -> None:
    code = "import sys; sys.modules['httpx'] = None; import tether.client"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "pip install 'tether[client]'" in proc.stderr.strip().splitlines()[-1]
