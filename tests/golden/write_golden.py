"""Write the golden log of a schema version once; it must then decode forever.

Usage: python tests/golden/write_golden.py v1   (refuses to overwrite)
       python tests/golden/write_golden.py v1_steps   (journaled steps, a crash, a resume)
       python tests/golden/write_golden.py v1_waits   (a run with waits: an event, a timeout)
       python tests/golden/write_golden.py v1_agent   (an agent conversation, written whole:
           run it with the code before slim records, e.g. PYTHONPATH=<that checkout>/src)
Format: for each row of run_log in seq order, a 4-byte big-endian length then the row bytes.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent


async def main(version: str) -> None:
    out = HERE / f"{version}.log"
    if out.exists():
        sys.exit(f"{out} exists: golden logs are never rewritten")
    if version.endswith("_waits"):
        rows, result = await waits()
        out.write_bytes(b"".join(len(r).to_bytes(4, "big") + r for r in rows))
        print(f"wrote {out}: {len(rows)} records, result {result}")
        return
    if version.endswith("_agent"):
        sys.path.insert(0, str(HERE.parent.parent))
        from tests.slim_agents import conversation
        from tether.store import store_from_url

        with tempfile.TemporaryDirectory() as tmp:
            async with store_from_url(f"sqlite:///{tmp}/g.db") as store:
                rows = await conversation(store)
        out.write_bytes(b"".join(len(r).to_bytes(4, "big") + r for r in rows))
        print(f"wrote {out}: {len(rows)} records")
        return
    os.environ["TETHER_DEMO_SPEED"] = "0"
    from tether.engine.runtime import Runtime
    from tether.store import store_from_url

    with tempfile.TemporaryDirectory() as tmp:
        async with store_from_url(f"sqlite:///{tmp}/g.db") as store:
            if version.endswith("_steps"):
                outcome = await _steps_run(store)
            else:
                from tether.demo.agent import agent

                outcome = await Runtime(store).start(agent, {"question": "golden"}, run_id="golden")
            rows = await store.log.read_all(outcome.run_id)
    out.write_bytes(b"".join(len(r).to_bytes(4, "big") + r for r in rows))
    print(f"wrote {out}: {len(rows)} records, result {outcome.result}")


async def waits() -> tuple[list[bytes], object]:
    """Two approvals: one answered by an event, the other timed out after the run parked."""
    sys.path.insert(0, str(HERE.parent.parent))
    from tests.waits_agents import approvals
    from tether.engine.runtime import Runtime
    from tether.store import store_from_url

    with tempfile.TemporaryDirectory() as tmp:
        async with store_from_url(f"sqlite:///{tmp}/g.db") as store:
            rt = Runtime(store, owner="golden")
            await rt.start(approvals, {"n": 2, "timeout": 1.0}, run_id="golden")
            await rt.signal("golden", "approve-0", {"approve": True}, event_id="golden-event")
            await rt.resume("golden")
            await asyncio.sleep(1.2)
            outcome = await rt.resume("golden")
            return await store.log.read_all("golden"), outcome.result


async def _steps_run(store: Any) -> Any:
    """A flow of three journaled steps, killed during the third, then resumed."""
    sys.path.insert(0, str(HERE.parent.parent))
    from tests import step_agents as sa
    from tether.engine.runtime import Runtime

    reached = sa.HANG_AT["write"] = asyncio.Event()
    task = asyncio.ensure_future(Runtime(store).start(sa.steps_agent, "golden", run_id="golden"))
    await reached.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    sa.HANG_AT.clear()
    return await Runtime(store).resume("golden")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
