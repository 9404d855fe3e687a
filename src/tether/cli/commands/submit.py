"""`tether submit`: queue a run for the workers."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tether.control.wiring import new_runtime, open_blobs
from tether.model.budgets import parse_budget
from tether.store import Store

ORDER = 30


def add_parser(sub: Any) -> None:
    """`tether submit`."""
    submit = sub.add_parser("submit", help="queue a run for the workers; prints its id")
    submit.add_argument("agent", help="agent name, module:attribute, or tether.agents entry point")
    submit.add_argument("--input", help="the run's input as JSON")
    submit.add_argument("--budget", help="limits, e.g. nodes=8,tokens=5000")
    submit.add_argument("--run-id", help="the run's id (default: a new one)")
    submit.add_argument(
        "--key", help="its concurrency key (a tenant, a user): `tether limits set --key` caps it"
    )
    submit.add_argument(
        "--priority", type=int, default=0, help="claimed before lower ones (default 0)"
    )
    submit.set_defaults(fn=cmd_submit)


async def cmd_submit(store: Store, args: argparse.Namespace) -> int:
    try:
        value = json.loads(args.input) if args.input is not None else None
    except json.JSONDecodeError as exc:
        raise ValueError(f"bad --input: not JSON ({exc})") from None
    budget = parse_budget(args.budget) if args.budget else None
    async with open_blobs(args.settings) as blobs:  # a large input is offloaded
        runtime = new_runtime(store, args.settings, blobs=blobs)
        run_id = await runtime.submit(
            args.agent,
            value,
            run_id=args.run_id,
            budget=budget,
            key=args.key,
            priority=args.priority,
        )
    print(run_id)
    return 0
