"""`tether schedule add|list|remove`: recurring runs that workers fire (issue 16)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from tether.cli.common import console
from tether.control.wiring import new_runtime
from tether.ops.schedules import view
from tether.store import Store
from tether.store.schedules import CATCH_UP

ORDER = 120


def add_parser(sub: Any) -> None:
    """`tether schedule add|list|remove`."""
    schedule = sub.add_parser("schedule", help="recurring runs at cron times, fired by workers")
    schedule_sub = schedule.add_subparsers(dest="schedule_command", required=True)
    add = schedule_sub.add_parser("add", help="run an agent at cron times")
    add.add_argument("name", help="the schedule's name (letters, digits, '_', '-')")
    add.add_argument(
        "--cron",
        required=True,
        help="5 fields (minute hour day month weekday), or 6 with seconds first "
        "('*/2 * * * * *': every 2 s), or @daily, @hourly...",
    )
    add.add_argument("--agent", required=True, help="agent name, module:attribute, entry point")
    add.add_argument("--input", help="each run's input as JSON")
    add.add_argument("--timezone", default="UTC", help="IANA zone the times are in (UTC)")
    add.add_argument(
        "--catch-up",
        choices=CATCH_UP,
        default="skip",
        help="times missed while no worker ran (over a minute late): skip them, or run "
        "once for them (skip)",
    )
    add.set_defaults(fn=cmd_schedule_add)
    list_ = schedule_sub.add_parser("list", help="the schedules and their next run")
    list_.add_argument("--json", action="store_true", help="one JSON array of schedules")
    list_.set_defaults(fn=cmd_schedule_list, read_only=True)
    remove = schedule_sub.add_parser("remove", help="stop a schedule (its runs stay)")
    remove.add_argument("name")
    remove.set_defaults(fn=cmd_schedule_remove)


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
    from tether.cli.display import cell
    from tether.cli.display import table as new_table

    # Names are whole (`tether schedule remove NAME`); time zones and agents give way.
    table = new_table(
        "name",
        "cron",
        "time zone",
        "agent",
        "catch-up",
        "next run (UTC)",
        flexible=("time zone", "agent"),
    )
    for s in schedules:
        at = datetime.fromtimestamp(s.next_at, UTC).isoformat(timespec="seconds")
        table.add_row(s.name, s.cron, cell(s.timezone), cell(s.agent), s.catch_up, at)
    console.print(table)
    return 0
