"""Terminal output: live progress of running runs, and a run's graph as a tree."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any, assert_never

from rich.console import Group
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from tether.engine.runtime import Runtime
from tether.foundation.money import money
from tether.model.graph import Graph
from tether.model.records import BudgetLimits, Record, body_of
from tether.store.base import RunInfo


class Progress:
    """Follows a runtime's records and events; renders a compact live table."""

    def __init__(self, runtime: Runtime) -> None:
        self.started = time.monotonic()
        self.running: dict[tuple[str, str], str] = {}
        self.recorded = 0
        self.tokens = 0
        self.cost = 0.0
        # The top-level run's limits (sub-agent runs have their own).
        self.limits = BudgetLimits()
        self.lines: list[str] = []
        runtime.events.on_record(self._on_record)
        runtime.events.on_event(self._on_event)

    def _on_event(self, run_id: str, node_id: str, event: dict[str, Any]) -> None:
        if event.get("type") == "node_started":
            self.running[(run_id, node_id)] = event["kind"]

    def _on_record(self, run_id: str, seq: int, record: Record) -> None:
        body = body_of(record)
        short = run_id.split(".")[-1][:10] if "." in run_id else run_id[:10]
        match body:
            case "node_completed":
                nc = record.node_completed
                self.running.pop((run_id, nc.node_id), None)
                self.recorded += 1
                self.tokens += nc.used.tokens_in + nc.used.tokens_out
                self.cost += nc.used.cost
                line = f"seq {seq:>3}  {short:<10} {nc.kind:<9} {nc.node_id[:8]:<8}"
                line += f" {nc.used.wall_ms:>5} ms"
                if nc.used.rate_wait_ms:
                    line += f" (rate wait {nc.used.rate_wait_ms} ms)"
                line += "  (fallback)" if nc.fallback else ""
            case "node_failed":
                nf = record.node_failed
                line = (
                    f"seq {seq:>3}  {short:<10} {nf.kind:<9} "
                    f"FAILED {nf.error_type}: {nf.message[:40]}"
                )
            case "run_waiting":
                keys = ", ".join(record.run_waiting.keys)
                line = f"seq {seq:>3}  {short:<10} waiting for {keys}"
            case "step_recorded":
                sr = record.step_recorded
                self.tokens += sr.used.tokens_in + sr.used.tokens_out
                self.cost += sr.used.cost
                line = (
                    f"seq {seq:>3}  {short:<10} step {sr.index:<4} {sr.node_id[:8]:<8}"
                    f" {sr.used.wall_ms:>5} ms  {sr.name[:30]}"
                )
            case "run_started" | "run_paused" | "run_resumed" | "run_finished" | None:
                if "." not in run_id and body == "run_started":
                    self.limits = record.run_started.limits
                resumed = record.run_resumed
                if "." not in run_id and body == "run_resumed" and resumed.HasField("limits"):
                    self.limits = resumed.limits
                line = f"seq {seq:>3}  {short:<10} {body}"
            case _:
                assert_never(body)
        self.lines = [*self.lines[-9:], line]

    def __rich__(self) -> Group:
        head = Table.grid(padding=(0, 2))
        head.add_row(
            Text(f"{time.monotonic() - self.started:6.1f}s", style="bold"),
            *self.usage(),
        )
        flight = ", ".join(sorted(k for k in self.running.values())) or "-"
        return Group(
            head, Text(f"running: {flight}", style="cyan"), Text("\n".join(self.lines), style="dim")
        )

    def usage(self) -> list[str]:
        """The progress line's counts, each against its limit if the run has one.

        Nodes in flight count against the node limit (never passed); tokens and cost are
        only known once nodes finish, so those in flight may pass their limits: said here.
        """
        lim = self.limits
        nodes = f"recorded {self.recorded}" + (f"/{lim.max_nodes}" if lim.max_nodes else "")
        tokens = f"tokens {self.tokens}" + (f"/{lim.max_tokens}" if lim.max_tokens else "")
        cost = f"cost {money(self.cost)}" + (f"/{money(lim.max_cost)}" if lim.max_cost else "")
        over = (lim.max_tokens and self.tokens >= lim.max_tokens) or (
            lim.max_cost and self.cost >= lim.max_cost
        )
        note = "  (limit reached: nodes in flight finish, and may pass it)" if over else ""
        return [nodes, f"in flight {len(self.running)}", tokens, cost + note]


# The most nodes `graph_tree` draws.
MAX_TREE_NODES = 200


def graph_tree(graph: Graph, title: str | None = None) -> Tree:
    """The run as a tree of spawns: kind, id, status, timing and tokens per node."""
    children: dict[str, list[str]] = {}
    roots = [s.node_id for s in graph.started.roots] if graph.started else []
    for nid in graph.order:
        nc = graph.completed(nid)
        assert nc is not None
        children[nid] = [s.node_id for s in nc.spawned]
    label = title or f"run {graph.run_id} [{graph.agent}] {graph.status}"
    tree = Tree(Text(label, style="bold"))

    def add(parent: Tree, nid: str) -> Tree:
        state = graph.nodes[nid]
        nc = state.completed
        if nc is not None:
            tokens = nc.used.tokens_in + nc.used.tokens_out
            extra = f"  {tokens} tok" if tokens else ""
            if nc.used.rate_wait_ms:
                extra += f"  rate wait {nc.used.rate_wait_ms} ms"
            parents = graph.parents_of(nid)
            joins = f"  joins {len(parents)}" if len(parents) > 1 else ""
            text = Text(
                f"{state.spec.kind} {nid[:8]}  {nc.used.wall_ms} ms{extra}{joins}", style="green"
            )
        elif state.failed is not None:
            text = Text(
                f"{state.spec.kind} {nid[:8]}  failed: {state.failed.message[:60]}", style="red"
            )
        elif nid in graph.open_waits:
            text = Text(f"wait {state.spec.wait.key!r}  waiting for an event", style="yellow")
        else:
            text = Text(f"{state.spec.kind} {nid[:8]}  pending", style="yellow")
        branch = parent.add(text)
        for failure in graph.failures_of(nid):  # the attempt history of a retried node
            branch.add(
                Text(
                    f"attempt {failure.attempt} failed: {failure.error_type}: "
                    f"{failure.message[:60]}",
                    style="red",
                )
            )
        if nc is not None and graph.failures_of(nid):
            branch.add(Text(f"attempt {nc.attempt} {'fallback' if nc.fallback else 'completed'}"))
        for blob in nc.blobs if nc is not None else ():
            # Where the bytes are, how many, and their hash: enough to find and check them.
            branch.add(
                Text(
                    f"attached {blob.media_type} {blob.size} B sha256 {blob.sha256[:16]}… "
                    f"{blob.url}",
                    style="magenta",
                )
            )
        for i in sorted(state.steps or ()):
            sr = (state.steps or {})[i]
            tokens = sr.used.tokens_in + sr.used.tokens_out
            extra = f"  {tokens} tok" if tokens else ""
            branch.add(Text(f"step {i} {sr.name}  {sr.used.wall_ms} ms{extra}", style="cyan"))
        return branch

    # Depth first with a stack of our own: a chain of thousands of nodes is that deep, and
    # drawing nests each level (its cost grows with the square of the depth), so the tree
    # stops at MAX_TREE_NODES and says how many it left out.
    stack = [(tree, root) for root in reversed(roots)]
    drawn = 0
    while stack and drawn < MAX_TREE_NODES:
        parent, nid = stack.pop()
        branch = add(parent, nid)
        drawn += 1
        stack += [(branch, child) for child in reversed(children.get(nid, []))]
    if len(graph.nodes) > drawn:
        tree.add(
            Text(
                f"… {len(graph.nodes) - drawn} more nodes not drawn "
                f"(tether show {graph.run_id} --json lists every node)",
                style="dim",
            )
        )
    return tree


def budget_line(graph: Graph) -> str:
    lim = graph.limits
    parts = [f"nodes {graph.completed_count}" + (f"/{lim.max_nodes}" if lim.max_nodes else "")]
    parts.append(f"tokens {graph.tokens}" + (f"/{lim.max_tokens}" if lim.max_tokens else ""))
    parts.append(f"cost {money(graph.cost)}" + (f"/{money(lim.max_cost)}" if lim.max_cost else ""))
    parts.append(f"wall {graph.wall_ms() / 1000:.1f}s")
    return "budget: " + ", ".join(parts)


def age(seconds: float) -> str:
    """A duration as a short age: `45s`, `12m`, `3h`, `5d`."""
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


def lease_state(left: float) -> str:
    return f"{left:.1f}s left" if left >= 0 else f"expired {-left:.1f}s ago"


def nested(rows: list[RunInfo]) -> list[tuple[int, RunInfo]]:
    """`rows` with each sub-agent run right under its parent (when listed), with its depth;
    otherwise in the order given (newest first)."""
    listed = {r.run_id for r in rows}
    children: dict[str, list[RunInfo]] = {}
    for r in rows:
        if r.parent_run_id in listed:
            children.setdefault(r.parent_run_id, []).append(r)
    out: list[tuple[int, RunInfo]] = []

    def add(r: RunInfo, depth: int) -> None:
        out.append((depth, r))
        for child in reversed(children.get(r.run_id, [])):  # oldest (started first) first
            add(child, depth + 1)

    for r in rows:
        if r.parent_run_id not in listed:
            add(r, 0)
    return out


def table(*columns: str, flexible: tuple[str, ...] = ()) -> Table:
    """A table that fits the terminal (80 columns in a pipe or a CI log) one line a row.

    No cell wraps. Only the `flexible` columns (reasons, notes, owners, names) give up width,
    cut with `…`; every other column (ids a user copies, states, numbers) is kept whole.
    """
    out = Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold")
    for name in columns:
        # A flexible column may shrink (rich narrows wrappable columns first); its cells
        # are one-line `Text`s (`cell`), so shrinking cuts them instead of wrapping.
        out.add_column(cell(name), no_wrap=name not in flexible, overflow="ellipsis")
    return out


def cell(text: str) -> Text:
    """A flexible column's cell: one line, cut with `…` when the column is narrowed."""
    return Text(text, no_wrap=True, overflow="ellipsis")


def owner_cell(owner: str, left: float | None) -> str:
    """Who holds a run and its lease left, short: `host:pid 12s` (no time once the lease ran
    out: the run's state says `orphaned` then)."""
    if left is None or left < 0:
        return owner
    return f"{owner} {math.ceil(left)}s"


def runs_table(rows: list[RunInfo], now: float, origins: Mapping[str, object] = {}) -> Table:
    """`tether runs`: one line a run in 80 columns, sub-agent runs indented under their
    parent (shown by the part of their id after the parent's; one listed without its parent
    shows its full id), the owner with its lease left, long reasons cut with `…`; a fork's
    reason says what it was forked from (`origins`: run id -> `RUN@SEQ`)."""
    # Run ids are what users copy into `tether resume`/`show`: never cut.
    out = table(
        "run id", "agent", "state", "age", "owner", "reason", flexible=("agent", "owner", "reason")
    )
    out.columns[3].justify = "right"
    for depth, r in nested(rows):
        run_id = r.run_id
        if depth and r.parent_run_id:
            run_id = "  " * (depth - 1) + "└ " + r.run_id[len(r.parent_run_id) :]
        owner = "-"
        if r.owner and not r.status.finished:
            owner = owner_cell(r.owner, r.lease_left(now))
        reason = r.reason or ""
        if r.run_id in origins:
            reason = f"forked from {origins[r.run_id]}" + (f"; {reason}" if reason else "")
        out.add_row(
            run_id, cell(r.agent), r.state(now), age(now - r.created_at), cell(owner), cell(reason)
        )
    return out
