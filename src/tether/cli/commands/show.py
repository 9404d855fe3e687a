"""`tether show`: a run's graph, status, budget and timings."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tether.cli.common import console, print_waits
from tether.control.deploys import with_waiting
from tether.control.wiring import new_runtime
from tether.model.run_view import run_view, status_words, with_row
from tether.store import Store

ORDER = 60


def add_parser(sub: Any) -> None:
    """`tether show`."""
    show = sub.add_parser("show", help="a run's graph, status, budget and timings")
    show.add_argument("run_id")
    show.add_argument("--json", action="store_true", help="stable JSON (see README)")
    show.add_argument("--outputs", action="store_true", help="include node outputs in --json")
    show.add_argument(
        "--at", type=int, metavar="SEQ", help="the run as it was once the record at SEQ was"
    )
    show.set_defaults(fn=cmd_show, read_only=True)


async def cmd_show(store: Store, args: argparse.Namespace) -> int:
    graph = await new_runtime(store, args.settings).load(args.run_id, at_seq=args.at)
    # As of a seq, the run is its log's prefix: its row (owner, lease) is today's, not shown.
    info = await store.runs.get(args.run_id) if args.at is None else None
    now = await store.runs.clock()
    if info is not None:
        [info] = await with_waiting(store, [info])
    if args.json:
        view = with_row(run_view(graph, outputs=args.outputs), info, now)
        view["at_seq"] = args.at
        if info is not None:
            view["lease_left"] = info.lease_left(now)
        print(json.dumps(view, indent=2))
        return 0
    from tether.cli.display import budget_line, graph_tree, lease_state

    if args.at is not None:
        console.print(f"run {args.run_id} as of seq {args.at} (tether history lists the seqs)")
    state = status_words(graph.status, info, now)[1]  # as `tether runs` says it
    console.print(graph_tree(graph, f"run {graph.run_id} [{graph.agent}] {state}"))
    if graph.agent_version:
        console.print(f"agent {graph.agent} version {graph.agent_version}")
    for n, retry in enumerate(graph.retries, 1):
        nodes = ", ".join(nid[:8] for nid in retry.node_ids) or "none"
        console.print(
            f"retry {n} at seq {retry.seq}: it had failed ({retry.error}); ran again: {nodes}",
            highlight=False,
            markup=False,
        )
    console.print(budget_line(graph))
    if graph.reason:
        console.print(f"reason: {graph.reason}")
    elif info is not None and info.reason and not info.status.finished:
        console.print(f"{info.state(now)}: {info.reason}")  # e.g. why no worker took it
    if info is not None and info.owner and not info.status.finished:
        left = info.lease_left(now)
        lease = "" if left is None else f", lease {lease_state(left)}"
        console.print(f"{info.state(now)}: owner {info.owner}, epoch {info.epoch}{lease}")
    if graph.open_waits:
        print_waits(graph)
    return 0
