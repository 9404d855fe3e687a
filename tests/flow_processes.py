"""Real `tether` processes for the flow-control tests (rate limits, schedules)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def env(model_url: str = "") -> dict[str, str]:
    """This tether and the tests package on the path; the local model server's URL."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    e["TETHER_TEST_MODEL_URL"] = model_url
    return e


async def tether(url: str, *args: str) -> str:
    """Run one command on the store at `url`; its stdout (it must succeed)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tether", *args, "--db", url,
        env=env(), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, (out, err)
    return out.decode()


async def start_workers(
    url: str, n: int, *args: str, model_url: str = "", stderr: int = asyncio.subprocess.PIPE
) -> list[asyncio.subprocess.Process]:
    """`n` workers on `url`, returned once each has said it is ready."""
    workers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tether",
            "worker",
            "--db",
            url,
            *args,
            env=env(model_url),
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
        for _ in range(n)
    ]
    for w in workers:
        assert w.stdout is not None
        assert "ready" in (await asyncio.wait_for(w.stdout.readline(), 60)).decode()
    return workers
