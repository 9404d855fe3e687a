"""`tether fork`: a new run from a run's history (issue 13); `tether history` lists the
checkpoints."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tether.cli.common import _execute, services_for
from tether.control import actions as control
from tether.control.wiring import new_runtime, open_blobs
from tether.engine.ownership import DEFAULT_LEASE_TTL
from tether.model.budgets import parse_change
from tether.store import Store

ORDER = 70


def add_parser(sub: Any) -> None:
    """`tether fork`."""
    fork = sub.add_parser("fork", help="a new queued run from a run's history; prints its id")
    fork.add_argument("run_id")
    point = fork.add_mutually_exclusive_group(required=True)
    point.add_argument("--at", type=int, metavar="SEQ", help="keep the records up to this seq")
    point.add_argument(
        "--before", metavar="NODE_ID", help="keep the records before this node's record"
    )
    fork.add_argument(
        "--set",
        action="append",
        metavar="NODE_ID=JSON",
        help="replace the output of a node completed by then (repeatable)",
    )
    fork.add_argument(
        "--input",
        action="append",
        metavar="NODE_ID=JSON",
        help="replace the input of a node pending then (repeatable)",
    )
    fork.add_argument("--budget", help="new limits; +N adds, e.g. tokens=+50000")
    fork.add_argument("--run", action="store_true", help="execute the fork here now")
    fork.add_argument("--quiet", action="store_true", help="no live progress display (--run)")
    fork.add_argument(
        "--lease-ttl", type=float, default=DEFAULT_LEASE_TTL, help="lease of --run (seconds)"
    )
    fork.add_argument("--grace", type=float, default=25.0, help="seconds in-flight nodes get")
    fork.set_defaults(fn=cmd_fork)


def parse_sets(items: list[str], option: str = "--set") -> dict[str, Any]:
    """`NODE_ID=JSON` items as {node_id: value}; ValueError naming a bad one."""
    values: dict[str, Any] = {}
    for item in items:
        node_id, eq, raw = item.partition("=")
        if not eq or not node_id:
            raise ValueError(
                f"bad {option} {item!r}: use NODE_ID=JSON, e.g. {{node}}='{{\"a\": 1}}'"
            )
        try:
            values[node_id] = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"bad {option} {item!r}: the value is not JSON ({exc})") from None
    return values


async def cmd_fork(store: Store, args: argparse.Namespace) -> int:
    sets = parse_sets(args.set or [])
    inputs = parse_sets(args.input or [], "--input")
    async with open_blobs(args.settings) as blobs:  # an override may be offloaded
        runtime = new_runtime(store, args.settings, blobs=blobs)
        # `+N` is counted from the fork point's usage (applied by the fork on its prefix).
        budget = parse_change(args.budget) if args.budget else None
        fork_id = await runtime.fork(
            args.run_id,
            at_seq=args.at,
            before_node=args.before,
            set_outputs=sets,
            set_inputs=inputs,
            budget=budget,
        )
    print(fork_id, flush=True)
    if not args.run:
        return 0
    graph = await runtime.load(fork_id)  # handed to the resume: the fork is read once
    async with services_for(graph.agent, args):
        return await _execute(store, args, lambda rt: control.resume(rt, fork_id, graph=graph))
