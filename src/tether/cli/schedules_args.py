"""The arguments of `tether schedule` (what each command does is in
`tether.cli.schedules`)."""

from __future__ import annotations

from typing import Any

from tether.cli import schedules as commands_schedules
from tether.store.schedules import CATCH_UP


def add_schedule(sub: Any) -> None:
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
    add.set_defaults(fn=commands_schedules.cmd_schedule_add)
    list_ = schedule_sub.add_parser("list", help="the schedules and their next run")
    list_.add_argument("--json", action="store_true")
    list_.set_defaults(fn=commands_schedules.cmd_schedule_list, read_only=True)
    remove = schedule_sub.add_parser("remove", help="stop a schedule (its runs stay)")
    remove.add_argument("name")
    remove.set_defaults(fn=commands_schedules.cmd_schedule_remove)
