"""The run tree the CLI prints after a run: deep chains draw (a bounded part) without failing."""

from __future__ import annotations

import io

from rich.console import Console
from rich.tree import Tree

from tether import Context, Node, NodeResult, Registry, Runtime, Spawn
from tether.cli.display import MAX_TREE_NODES, graph_tree
from tether.store import store_from_url

deep = Registry("test-display-deep", entry="step")


@deep.node("step")
async def step(ctx: Context, node: Node) -> NodeResult:
    left: int = node.input
    if left <= 1:
        return NodeResult(output=left, is_result=True)
    return NodeResult(output=left, spawn=[Spawn("step", left - 1)])


def labels(tree: Tree) -> list[str]:
    """Every label under the tree's root, depth first."""
    out: list[str] = []
    stack = list(reversed(tree.children))
    while stack:
        node = stack.pop()
        out.append(str(node.label))
        stack += reversed(node.children)
    return out


async def tree_of(nodes: int) -> tuple[list[str], str]:
    async with store_from_url("memory:") as store:
        outcome = await Runtime(store).start(deep, nodes)
    tree = graph_tree(outcome.graph)
    console = Console(width=100, file=io.StringIO())
    console.print(tree)  # drawing a tree this deep must not fail either
    return labels(tree), outcome.graph.run_id


async def test_a_chain_deeper_than_the_recursion_limit_draws_its_first_nodes() -> None:
    drawn, run_id = await tree_of(1500)
    assert sum(label.startswith("step ") for label in drawn) == MAX_TREE_NODES
    assert drawn[-1].startswith(f"… {1500 - MAX_TREE_NODES} more nodes not drawn")
    assert f"tether show {run_id} --json" in drawn[-1]


async def test_a_small_run_draws_every_node() -> None:
    drawn, _ = await tree_of(5)
    assert len(drawn) == 5 and all(label.startswith("step ") for label in drawn)
