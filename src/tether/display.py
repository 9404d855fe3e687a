"""Terminal output: live progress of running runs, and a run's graph as a tree."""

from __future__ import annotations

import time
from typing import Any, assert_never

from rich.console import Group
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from tether.graph import Graph
from tether.records import Record, body_of
from tether.runtime import Runtime


class Progress:
    """Follows a runtime's records and events; renders a compact live table."""

    def __init__(self, runtime: Runtime) -> None:
        self.started = time.monotonic()
        self.running: dict[tuple[str, str], str] = {}
        self.recorded = 0
        self.tokens = 0
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
                line = (
                    f"seq {seq:>3}  {short:<10} step {sr.index:<4} {sr.node_id[:8]:<8}"
                    f" {sr.used.wall_ms:>5} ms  {sr.name[:30]}"
                )
            case "run_started" | "run_paused" | "run_resumed" | "run_finished" | None:
                line = f"seq {seq:>3}  {short:<10} {body}"
            case _:
                assert_never(body)
        self.lines = [*self.lines[-9:], line]

    def __rich__(self) -> Group:
        head = Table.grid(padding=(0, 2))
        head.add_row(
            Text(f"{time.monotonic() - self.started:6.1f}s", style="bold"),
            f"recorded {self.recorded}",
            f"in flight {len(self.running)}",
            f"tokens {self.tokens}",
        )
        flight = ", ".join(sorted(k for k in self.running.values())) or "-"
        return Group(
            head, Text(f"running: {flight}", style="cyan"), Text("\n".join(self.lines), style="dim")
        )


# The most nodes `graph_tree` draws.
MAX_TREE_NODES = 200


def graph_tree(graph: Graph, title: str | None = None) -> Tree:
    """The run as a tree of spawns: kind, id, status, timing and tokens per node."""
    children: dict[str, list[str]] = {}
    roots = [s.node_id for s in graph.started.roots] if graph.started else []
    for nid in graph.order:
        nc = graph.nodes[nid].completed
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
            joins = f"  joins {len(nc.parent_ids)}" if len(nc.parent_ids) > 1 else ""
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
    parts.append(f"cost ${graph.cost:.4f}" + (f"/${lim.max_cost:g}" if lim.max_cost else ""))
    parts.append(f"wall {graph.wall_ms() / 1000:.1f}s")
    return "budget: " + ", ".join(parts)
