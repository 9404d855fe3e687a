"""An agent whose code differs between releases, chosen by $DEPLOY_RELEASE in each process.

Release 1 (version "1"): plan -> search -> draft -> review -> publish, each node
$DEPLOY_NODE_S seconds (0 by default). Release 2 (version "2") renamed `review` to
`critique` and declares release 1 compatible for the runs that have not reached `review`
(a `compatible=` function). Release 3 (version "3") renamed `plan` to `outline` and
declares nothing compatible: it serves none of release 1's runs.
"""

from __future__ import annotations

import asyncio
import os

from tether import Context, Node, NodeResult, Registry, Spawn
from tether.engine.registry import PendingRun

RELEASE = os.environ.get("DEPLOY_RELEASE", "1")
NODE_S = float(os.environ.get("DEPLOY_NODE_S", "0"))
# The first node of the run whose input is {"i": i} takes i * STAGGER_S longer, so that runs
# started together are at different nodes a few seconds later.
STAGGER_S = float(os.environ.get("DEPLOY_STAGGER_S", "0"))
FIRST = "outline" if RELEASE == "3" else "plan"
REVIEW = "critique" if RELEASE == "2" else "review"
CHAIN = [FIRST, "search", "draft", REVIEW, "publish"]


def not_reached_review(run: PendingRun) -> bool:
    """Release 1's runs that have not reached `review` are release 2's too."""
    return "review" not in run.kinds


agent = Registry(
    "tests.deploy_agents:agent",
    entry=FIRST,
    version=RELEASE,
    compatible=not_reached_review if RELEASE == "2" else None,
)


def _step(kind: str, then: str | None) -> None:
    async def handler(ctx: Context, node: Node) -> NodeResult:
        extra = 0.0
        if kind == FIRST and isinstance(node.input, dict):
            extra = STAGGER_S * float(node.input.get("i", 0))
        if NODE_S or extra:
            await asyncio.sleep(NODE_S + extra)
        spawn = [Spawn(then, node.input)] if then else []
        return NodeResult(f"{kind} by release {RELEASE}", spawn=spawn, is_result=then is None)

    agent.add(kind, handler)


for _kind, _then in zip(CHAIN, [*CHAIN[1:], None], strict=True):
    _step(_kind, _then)
