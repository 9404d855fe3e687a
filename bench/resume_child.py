"""`python -m bench.resume_child URL RUN_ID OUT`: what `tether resume RUN_ID` does, in a
fresh process, timed from the command's start (store open, as the CLI opens it) until the
run's first pending node starts; writes {"seconds", "reads"} as JSON to OUT.

`reads` counts the times the run's log was read: a resume reads and rebuilds it once.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from bench import agents
from tether.cli import app as cli
from tether.cli.commands.run import cmd_resume
from tether.control.wiring import Settings, open_store


async def _resume(url: str, run_id: str) -> dict[str, float | int]:
    args = cli.build_parser().parse_args(["resume", run_id, "--quiet", "--db", url])
    args.settings = Settings.from_args(args)
    args.keys = args.settings.keys
    async with open_store(args.settings) as store:
        reads = 0
        read_all = store.log.read_all

        async def counted(rid: str) -> list[bytes]:
            nonlocal reads
            reads += 1
            return await read_all(rid)

        store.log.read_all = counted  # type: ignore[method-assign]
        t0 = time.perf_counter()
        rc = await cmd_resume(store, args)
    assert rc == 0, f"tether resume exited {rc}"
    assert agents.first_step_at is not None, "no node ran"
    return {"seconds": agents.first_step_at - t0, "reads": reads}


def main() -> None:
    url, run_id, out = sys.argv[1:4]
    cli.freeze_imports()  # as the `tether` command's entry does first
    Path(out).write_text(json.dumps(asyncio.run(_resume(url, run_id))))


if __name__ == "__main__":
    main()
