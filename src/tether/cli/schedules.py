"""`tether schedule add|list|remove`: recurring runs that workers fire (issue 16)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime

from tether.cli.commands import console
from tether.control.wiring import new_runtime
from tether.ops.schedules import view
from tether.store import Store


async def cmd_schedule_add(store: Store, args: argparse.Namespace) -> int:
    try:
        value = json.loads(args.input) if args.input is not None else None
    except json.JSONDecodeError as exc:
        raise SystemExit(f"bad --input: not JSON ({exc})") from None
    runtime = new_runtime(store, args.settings)
    schedule = await runtime.schedules.add(
        args.name,
        cron_expr=args.cron,
        agent=args.agent,
        input=value,
        timezone=args.timezone,
        catch_up=args.catch_up,
    )
    first = datetime.fromtimestamp(schedule.next_at, UTC).isoformat(timespec="seconds")
    print(f"schedule {schedule.name} added; first run at {first}")
    return 0


async def cmd_schedule_remove(store: Store, args: argparse.Namespace) -> int:
    await new_runtime(store, args.settings).schedules.remove(args.name)
    print(f"schedule {args.name} removed (runs it queued stay)")
    return 0


async def cmd_schedule_list(store: Store, args: argparse.Namespace) -> int:
    schedules = await store.schedules.all()
    if args.json:
        print(json.dumps([view(s) for s in schedules], indent=2))
        return 0
    if not schedules:
        print('no schedules; `tether schedule add NAME --cron "*/5 * * * *" --agent A` adds one')
        return 0
    from rich.table import Table

    table = Table("name", "cron", "time zone", "agent", "catch-up", "next run (UTC)")
    for s in schedules:
        at = datetime.fromtimestamp(s.next_at, UTC).isoformat(timespec="seconds")
        table.add_row(s.name, s.cron, s.timezone, s.agent, s.catch_up, at)
    console.print(table)
    return 0
