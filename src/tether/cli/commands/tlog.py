"""`tether export`, `tether import` and `tether check`: runs as `.tlog` files (issue 13)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from tether.cli.common import count
from tether.control.wiring import open_blobs
from tether.engine.registry import resolve_agent
from tether.ops.tlog.check import check_file, file_chunks, tlog_files
from tether.ops.tlog.export import export_run
from tether.ops.tlog.load import import_tlog, read_tlog
from tether.store import Store

ORDER = 80


def add_parser(sub: Any) -> None:
    """`tether export`, `tether import` and `tether check`."""
    export = sub.add_parser(
        "export", help="write a run, its sub-agent runs (and blobs) to a .tlog file"
    )
    export.add_argument("run_id")
    export.add_argument("-o", "--output", required=True, help="the file to write (- : stdout)")
    export.add_argument(
        "--with-blobs", action="store_true", help="include the blobs the records point to"
    )
    export.set_defaults(fn=cmd_export, read_only=True)
    imp = sub.add_parser("import", help="load a .tlog file into this store (all or nothing)")
    imp.add_argument("file")
    imp.set_defaults(fn=cmd_import, read_only=False)
    check = sub.add_parser(
        "check",
        help="check saved .tlog runs against the agent code here (handlers, input shapes); "
        "exit 1 if any fails",
    )
    check.add_argument("agent", help="agent name, module:attribute, or tether.agents entry point")
    check.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    check.set_defaults(fn=cmd_check, opens_store=False)


async def cmd_export(store: Store, args: argparse.Namespace) -> int:
    async with open_blobs(args.settings) as blobs:
        chunks = export_run(store, args.run_id, blobs=blobs if args.with_blobs else None)
        if args.output == "-":
            out = sys.stdout.buffer
            async for chunk in chunks:
                out.write(chunk)
            out.flush()
            return 0
        # Written beside the target and renamed at the end: a failed export leaves no file
        # that looks whole (an import would refuse it anyway: it has no end frame).
        target = Path(args.output)
        part = target.with_name(target.name + ".part")
        f = await asyncio.to_thread(part.open, "wb")
        try:
            async for chunk in chunks:
                await asyncio.to_thread(f.write, chunk)
            f.close()
            await asyncio.to_thread(os.replace, part, target)
        finally:
            f.close()
            part.unlink(missing_ok=True)
    print(f"exported run {args.run_id} to {target}")
    return 0


async def cmd_import(store: Store, args: argparse.Namespace) -> int:
    tlog = await read_tlog(args.file, file_chunks(args.file))
    async with open_blobs(args.settings) as blobs:
        done = await import_tlog(store, tlog, blobs=blobs, source=args.file)
    if done.already:
        print(f"run {done.run_id}: already in this store; nothing imported")
    else:
        print(
            f"imported run {done.run_id}: {count(len(done.created), 'run')}, "
            f"{count(done.records, 'record')}, {count(done.blobs, 'blob')}"
        )
    return 0


async def cmd_check(args: argparse.Namespace) -> int:
    """One line per file (ok / FAIL), detail lines under a failure; 1 if any failed."""
    registry = resolve_agent(args.agent)
    files = tlog_files(args.paths)
    if not files:
        raise FileNotFoundError(f"no .tlog files in {' '.join(args.paths)}")
    failed = 0
    for path in files:
        verdict = await check_file(registry, path)
        if verdict.undecodable is not None:
            print(f"FAIL {path}: does not decode: {verdict.undecodable}")
        elif verdict.problems:
            print(f"FAIL {path}: {count(len(verdict.problems), 'problem')}")
            for problem in verdict.problems:
                print(f"  {problem}")
        else:
            pending = count(verdict.pending, "pending node")
            print(f"ok   {path}: {count(verdict.runs, 'run')}, {pending} checked")
        failed += not verdict.ok
    checked = count(len(files), "file")
    print(f"{checked} checked against {registry.name} {registry.version}, {failed} failed")
    return 1 if failed else 0
