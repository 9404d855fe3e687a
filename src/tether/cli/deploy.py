"""`tether workers`, `tether deploy check` and `tether runs upgrade` (issue 14)."""

from __future__ import annotations

import argparse
import json

from tether.cli.commands import console
from tether.control.deploys import deploy_check, upgrade
from tether.control.wiring import new_runtime, open_blobs
from tether.engine.registry import resolve_agent
from tether.store import Store

# Seconds `runs upgrade` holds a run while it checks and moves it.
UPGRADE_TTL = 30.0


async def cmd_workers(store: Store, args: argparse.Namespace) -> int:
    live = await store.workers.live()
    now = await store.runs.clock()
    if args.json:
        print(json.dumps([w.as_dict(now) for w in live], indent=2))
        return 0
    if not live:
        console.print("no live workers")
        return 0
    from rich.table import Table

    table = Table("owner", "versions served", "runs held", "last beat", "up")
    for w in live:
        served = ", ".join(
            f"{agent} {s.version}"
            + (f" (+{', '.join(s.compatible)})" if s.compatible else "")
            + (" (+compatible())" if s.judged else "")
            for agent, s in sorted(w.versions.items())
        )
        table.add_row(
            w.owner,
            served or "(none yet)",
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


async def cmd_runs_upgrade(store: Store, args: argparse.Namespace) -> int:
    async with open_blobs(args.settings) as blobs:
        runtime = new_runtime(store, args.settings, blobs=blobs)
        status = await upgrade(runtime, args.run_id, args.to, ttl=UPGRADE_TTL)
    print(f"run {args.run_id}: on version {args.to} now ({status.value})")
    return 0
