"""`tether blobs gc` and `tether blobs verify`: the blob store's housekeeping."""

from __future__ import annotations

import argparse
from typing import Any

from tether.cli.common import console
from tether.control.wiring import open_blobs
from tether.store import Store

ORDER = 140


def add_parser(sub: Any) -> None:
    """`tether blobs gc` and `tether blobs verify`."""
    blobs = sub.add_parser("blobs", help="the blob store: garbage collection, checks")
    blobs_sub = blobs.add_subparsers(dest="blobs_command", required=True)
    gc = blobs_sub.add_parser("gc", help="delete blobs that no record points to")
    gc.add_argument(
        "--grace",
        type=float,
        default=3600.0,
        help="keep unreferenced blobs younger than this many seconds (in-flight nodes); "
        "default 3600, must exceed your longest node",
    )
    gc.add_argument("--dry-run", action="store_true", help="report what would be freed")
    gc.set_defaults(fn=cmd_blobs_gc)
    verify = blobs_sub.add_parser("verify", help="check every blob a run points to")
    verify.add_argument("run_id")
    verify.set_defaults(fn=cmd_blobs_verify, read_only=True)


async def cmd_blobs_gc(store: Store, args: argparse.Namespace) -> int:
    from tether.ops.blob_gc import collect_garbage

    async with open_blobs(args.settings) as blobs:
        report = await collect_garbage(store, blobs, grace=args.grace, dry_run=args.dry_run)
    verb = "would free" if report.dry_run else "freed"
    console.print(
        f"{blobs.root_url}: scanned {report.runs} runs, {report.referenced} referenced blobs; "
        f"{verb} {report.deleted} blobs ({report.freed_bytes} bytes); "
        f"kept {report.kept} ({report.kept_bytes} bytes)"
        + (f"; removed {report.temps_removed} stale temp files" if report.temps_removed else "")
    )
    return 0


async def cmd_blobs_verify(store: Store, args: argparse.Namespace) -> int:
    from tether.ops.blob_verify import verify_run

    async with open_blobs(args.settings) as blobs:
        report = await verify_run(store, blobs, args.run_id)
    for bad in report.bad:
        console.print(
            f"[red]bad[/] {bad.ref.url} ({bad.where}, record seq {bad.seq}): {bad.problem}",
            soft_wrap=True,
        )
    console.print(
        f"run {report.run_id}: checked {report.checked} blobs ({report.checked_bytes} bytes), "
        + ("all intact" if report.ok else f"{len(report.bad)} bad")
    )
    return 0 if report.ok else 1
