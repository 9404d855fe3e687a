"""`tether runs`: list runs; `tether runs prune|delete|upgrade`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tether.cli.common import console, count
from tether.control.deploys import upgrade, with_waiting
from tether.control.wiring import new_runtime, open_blobs
from tether.store import STATES, RunFilter, RunInfo, Status, Store, state_filter
from tether.store.forks import Origin

# Seconds `runs upgrade` holds a run while it checks and moves it.
UPGRADE_TTL = 30.0

ORDER = 40


def add_parser(sub: Any) -> None:
    """`tether runs`, `tether runs prune`, `tether runs delete` and `tether runs upgrade`."""
    runs = sub.add_parser(
        "runs", help="list runs, newest first, sub-agent runs under their parent; prune or delete"
    )
    runs.add_argument(
        "--status", choices=STATES, help="only runs in it (orphaned: running, lease ran out)"
    )
    runs.add_argument("--agent", help="only runs of this agent")
    runs.add_argument("--limit", type=int, default=50, help="at most this many runs (50)")
    runs.add_argument("--json", action="store_true", help="one JSON array of runs")
    runs.set_defaults(fn=cmd_runs, read_only=True)
    runs_sub = runs.add_subparsers(dest="runs_command")
    finished = [s.value for s in Status if s.finished]
    prune = runs_sub.add_parser("prune", help="delete finished runs older than a duration")
    prune.add_argument(
        "--finished-before",
        required=True,
        metavar="DURATION",
        help="delete runs that finished more than this long ago, e.g. 30d, 12h, 1d12h",
    )
    prune.add_argument(
        "--status", action="append", choices=finished, help="only runs that ended so; repeat"
    )
    prune.add_argument("--agent", help="only runs of this agent")
    prune.add_argument("--dry-run", action="store_true", help="report what would be removed")
    prune.add_argument("--list", action="store_true", help="print each removed run id")
    prune.set_defaults(fn=cmd_runs_prune, read_only=False)
    delete = runs_sub.add_parser(
        "delete", help="delete a finished run, its sub-agent runs and blobs no other run uses"
    )
    delete.add_argument("run_id")
    delete.add_argument(
        "--shred",
        action="store_true",
        help="destroy the run's data key first (crypto-shredding): copies left anywhere (a "
        "fork's rows, backups of the blobs, an exported .tlog) can no longer be read",
    )
    delete.set_defaults(fn=cmd_runs_delete, read_only=False)
    upgrade = runs_sub.add_parser(
        "upgrade",
        help="move a run to another version of its agent's code (the code here must be that "
        "version and able to continue it)",
    )
    upgrade.add_argument("run_id")
    upgrade.add_argument("--to", required=True, metavar="VERSION", help="the version to move to")
    upgrade.set_defaults(fn=cmd_runs_upgrade, read_only=False)


async def cmd_runs(store: Store, args: argparse.Namespace) -> int:
    from tether.cli.display import runs_table

    status, where = None, RunFilter(agent=args.agent)
    if args.status:
        status, where = state_filter(args.status, where)
    rows = await store.runs.list(status=status, where=where, limit=args.limit)
    now = await store.runs.clock()  # leases are timed by the store's clock
    # A runnable run whose version no live worker serves says so (a deploy in progress).
    rows = await with_waiting(store, rows)
    origins = await store.forks.origins([r.run_id for r in rows])
    if args.json:
        print(json.dumps([_run_row(r, now, origins.get(r.run_id)) for r in rows], indent=2))
        return 0
    console.print(runs_table(rows, now, origins), soft_wrap=False)
    return 0


def _run_row(r: RunInfo, now: float, origin: Origin | None = None) -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "agent": r.agent,
        "status": r.status.value,
        "state": r.state(now),
        "lease_left": r.lease_left(now),
        "reason": r.reason,
        "parent_run_id": r.parent_run_id,
        "forked_from": origin.to_json() if origin else None,
        "created_at": r.created_at,
        "updated_at": r.updated_at,
        "owner": r.owner,
        "epoch": r.epoch,
        "lease_until": r.lease_until,
        "agent_version": r.agent_version,
        "key": r.key,
        "priority": r.priority,
    }


async def cmd_runs_prune(store: Store, args: argparse.Namespace) -> int:
    from tether.ops import parse_duration, prune
    from tether.store.retention import FINISHED

    older_than = parse_duration(args.finished_before)
    report = await prune(
        store,
        older_than=older_than,
        statuses=[Status(s) for s in args.status] if args.status else FINISHED,
        agent=args.agent,
        dry_run=args.dry_run,
    )
    if args.list:
        for run_id in report.run_ids:
            print(run_id)
    verb = "would remove" if report.dry_run else "removed"
    console.print(
        f"{verb} {count(report.runs, 'run')} finished before {args.finished_before} ago "
        f"(+{count(report.child_runs, 'sub-agent run')}): {count(report.rows, 'log row')}, "
        f"{count(report.bytes, 'byte')}"
        + (f"; kept {report.skipped} with a live sub-agent run" if report.skipped else "")
        + ("" if report.dry_run else "; `tether blobs gc` now frees their blobs")
    )
    return 0


async def cmd_runs_delete(store: Store, args: argparse.Namespace) -> int:
    from tether.ops import delete_run

    async with open_blobs(args.settings) as blobs:
        report = await delete_run(store, args.run_id, blobs=blobs, shred=args.shred)
    console.print(
        (f"shredded {report.shredded} run keys, then " if args.shred else "")
        + f"deleted run {report.run_id} ({count(report.runs, 'run')} with its sub-agent runs): "
        f"{count(report.rows, 'log row')}, {count(report.log_bytes, 'byte')}; "
        f"{count(report.blobs, 'blob')}, {count(report.blob_bytes, 'byte')}"
        + (f"; kept {report.blobs_kept} blobs other runs point to" if report.blobs_kept else "")
    )
    return 0


async def cmd_runs_upgrade(store: Store, args: argparse.Namespace) -> int:
    async with open_blobs(args.settings) as blobs:
        runtime = new_runtime(store, args.settings, blobs=blobs)
        status = await upgrade(runtime, args.run_id, args.to, ttl=UPGRADE_TTL)
    print(f"run {args.run_id}: on version {args.to} now ({status.value})")
    return 0
