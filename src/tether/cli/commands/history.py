"""`tether history`: a run's records as checkpoints to fork from (issue 13)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from typing import Any

from tether.cli.common import console
from tether.model.history import checkpoints
from tether.model.records import decode_log
from tether.store import Store

ORDER = 90


def add_parser(sub: Any) -> None:
    """`tether history`."""
    history = sub.add_parser("history", help="a run's records as checkpoints to fork from")
    history.add_argument("run_id")
    history.add_argument(
        "--json",
        action="store_true",
        help="one JSON array of checkpoints: seq, at_us, kind, node_id, status, tokens, note",
    )
    history.set_defaults(fn=cmd_history, read_only=True)


async def cmd_history(store: Store, args: argparse.Namespace) -> int:
    rows = await store.log.read_all(args.run_id)
    if not rows:
        from tether.foundation.errors import UnknownRun

        raise UnknownRun(args.run_id)
    steps = list(checkpoints(decode_log(args.run_id, rows)))
    if args.json:
        print(json.dumps([s.to_json() for s in steps], indent=2))
        return 0
    from tether.cli.display import cell, table

    # Node ids are whole (`tether fork --set NODE=…` takes them); kinds and notes give way.
    out = table(
        "seq", "time (UTC)", "kind", "node", "status", "tokens", "note", flexible=("kind", "note")
    )
    out.columns[0].justify = out.columns[5].justify = "right"
    for s in steps:
        when = datetime.fromtimestamp(s.at_us / 1e6, UTC).strftime("%H:%M:%S.%f")[:-3]
        tokens = str(s.tokens or "")
        out.add_row(str(s.seq), when, cell(s.kind), s.node_id, s.status, tokens, cell(s.note or ""))
    console.print(out)
    console.print(f"fork from any seq: tether fork {args.run_id} --at SEQ")
    return 0
