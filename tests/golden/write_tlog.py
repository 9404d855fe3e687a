"""Write a golden `.tlog` file once; `tether check` must then accept it for as long as the
agent's code can continue it (tests/test_tlog_check.py runs the check on every one).

Usage: python tests/golden/write_tlog.py v1_demo_paused   (refuses to overwrite)
A demo run paused by its node budget with nodes pending, and the finished sub-agent run
(demo.analyst) it delegated to: what a deploy must still be able to continue.
Format: docs/reference/tlog.md.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent


async def main(name: str) -> None:
    out = HERE / f"{name}.tlog"
    if out.exists():
        sys.exit(f"{out} exists: golden files are never rewritten")
    if name != "v1_demo_paused":
        sys.exit(f"no golden named {name!r}")
    os.environ["TETHER_DEMO_SPEED"] = "0"
    from tether import Budget, Runtime, Status, export_run
    from tether.demo.agent import demo_models, research
    from tether.store import store_from_url

    with tempfile.TemporaryDirectory() as tmp:
        async with demo_models(None), store_from_url(f"sqlite:///{tmp}/g.db") as store:
            outcome = await research.run(Runtime(store), "golden", budget=Budget(max_nodes=8))
            assert outcome.status is Status.PAUSED, outcome
            data = b"".join([c async for c in export_run(store, outcome.run_id)])
    out.write_bytes(data)
    print(f"wrote {out}: {len(data)} bytes, run {outcome.run_id} {outcome.status.value}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
