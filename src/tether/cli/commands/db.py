"""`tether db migrate`: the database schema."""

from __future__ import annotations

import argparse
from typing import Any

from tether.cli.common import console, fail
from tether.store import migrate_url

ORDER = 170


def add_parser(sub: Any) -> None:
    """`tether db migrate` (not through `Store.open`, which migrates)."""
    db = sub.add_parser("db", help="database schema")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    migrate = db_sub.add_parser("migrate", help="apply pending migrations")
    migrate.add_argument(
        "--partitions",
        type=int,
        default=None,
        metavar="N",
        help="PostgreSQL: hash-partition run_log by run_id into N tables (1: one plain "
        "table); the log is copied in one transaction",
    )
    migrate.set_defaults(fn=cmd_migrate, opens_store=False)


async def cmd_migrate(args: argparse.Namespace) -> int:
    try:
        applied = await migrate_url(args.settings.db, partitions=args.partitions)
    except ValueError as exc:  # --partitions out of range, or not a PostgreSQL store
        return fail(str(exc))
    where = args.settings.db.split("@")[-1]
    console.print(f"{where}: " + (f"applied {', '.join(applied)}" if applied else "up to date"))
    return 0
