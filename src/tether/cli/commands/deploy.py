"""`tether workers` and `tether deploy check` (issue 14); `tether runs upgrade` is with
`tether runs`."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tether.cli.common import console
from tether.control.deploys import deploy_check
from tether.control.wiring import new_runtime, open_blobs
from tether.engine.registry import resolve_agent
from tether.store import Store

ORDER = 100


def add_parser(sub: Any) -> None:
    """`tether workers` and `tether deploy check`."""
    workers = sub.add_parser("workers", help="live workers: versions served, runs held")
    workers.add_argument(
        "--json",
        action="store_true",
        help="one JSON array of live workers: owner, versions, runs held, beat and start times",
    )
    workers.set_defaults(fn=cmd_workers, read_only=True)
    deploy = sub.add_parser("deploy", help="checks before deploying new agent code")
    deploy_sub = deploy.add_subparsers(dest="deploy_command", required=True)
    check = deploy_sub.add_parser(
        "check",
        help="list in-flight runs the agent code here could not continue; exit 1 if any",
    )
    check.add_argument("agent", help="agent name, module:attribute, or tether.agents entry point")
    check.add_argument("--json", action="store_true", help="the verdict as one JSON object")
    check.set_defaults(fn=cmd_deploy_check, read_only=True)


async def cmd_workers(store: Store, args: argparse.Namespace) -> int:
    live = await store.workers.live()
    now = await store.runs.clock()
    if args.json:
        print(json.dumps([w.as_dict(now) for w in live], indent=2))
        return 0
    if not live:
        console.print("no live workers")
        return 0
    from tether.cli.display import cell
    from tether.cli.display import table as new_table

    table = new_table(
        "owner", "versions served", "runs held", "last beat", "up", flexible=("versions served",)
    )
    for w in live:
        served = ", ".join(
            f"{agent} {s.version}"
            + (f" (+{', '.join(s.compatible)})" if s.compatible else "")
            + (" (+compatible())" if s.judged else "")
            for agent, s in sorted(w.versions.items())
        )
        table.add_row(
            w.owner,
            cell(served or "(none yet)"),
            str(w.runs_held),
            f"{max(0.0, now - w.beat_at):.1f}s ago",
            f"{max(0.0, now - w.started_at):.0f}s",
        )
    console.print(table)
    return 0


async def cmd_deploy_check(store: Store, args: argparse.Namespace) -> int:
    registry = resolve_agent(args.agent)
    async with open_blobs(args.settings) as blobs:  # pending inputs may be offloaded
        runtime = new_runtime(store, args.settings, blobs=blobs)
        checked = await deploy_check(runtime, args.agent)
    stranded = [c for c in checked if c.problems]
    if args.json:
        view = {
            "agent": args.agent,
            "version": registry.version,
            "checked": len(checked),
            "runs": [
                {
                    "run_id": c.info.run_id,
                    "status": c.info.status.value,
                    "version": c.version,
                    "problems": [p.as_dict() for p in c.problems],
                }
                for c in stranded
            ],
        }
        print(json.dumps(view, indent=2))
        return 1 if stranded else 0
    print(
        f"agent {args.agent} version {registry.version}: {len(checked)} in-flight runs checked, "
        f"{len(stranded)} this code cannot continue"
    )
    for c in stranded:
        for p in c.problems:
            print(f"  {c.info.run_id} ({c.info.status.value}, version {c.version}): {p.detail}")
    return 1 if stranded else 0
