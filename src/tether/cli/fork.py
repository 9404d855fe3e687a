"""`tether fork` and `tether history`: time travel over a run's log (issue 13)."""

from __future__ import annotations

import argparse
import contextlib
import json
from datetime import UTC, datetime
from typing import Any

from tether.cli.commands import _execute, console
from tether.control import actions as control
from tether.control.wiring import new_runtime, open_blobs
from tether.model.budgets import parse_change
from tether.model.history import checkpoints
from tether.model.records import decode_log
from tether.store import Store


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
    models: contextlib.AbstractAsyncContextManager[Any] = contextlib.nullcontext()
    if graph.agent.split(".")[0] == "demo":  # the demo's scripted model must be up
        from tether.demo.agent import demo_models

        models = demo_models(None)
    async with models:
        return await _execute(store, args, lambda rt: control.resume(rt, fork_id, graph=graph))


async def cmd_history(store: Store, args: argparse.Namespace) -> int:
    rows = await store.log.read_all(args.run_id)
    if not rows:
        from tether.foundation.errors import UnknownRun

        raise UnknownRun(args.run_id)
    steps = list(checkpoints(decode_log(args.run_id, rows)))
    if args.json:
        print(json.dumps([s.to_json() for s in steps], indent=2))
        return 0
    from rich.table import Table

    table = Table("seq", "time (UTC)", "kind", "node", "status", "tokens", "note")
    for s in steps:
        when = datetime.fromtimestamp(s.at_us / 1e6, UTC).strftime("%H:%M:%S.%f")[:-3]
        table.add_row(str(s.seq), when, s.kind, s.node_id, s.status, str(s.tokens or ""), s.note)
    console.print(table)
    console.print(f"fork from any seq: tether fork {args.run_id} --at SEQ")
    return 0
