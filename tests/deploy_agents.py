"""An agent whose code differs between releases, chosen by $DEPLOY_RELEASE in each process.

Release 1 starts at kind `plan`; release 2 renamed it `outline`: a release-2 worker cannot
continue a run whose `plan` node is pending.
"""

from __future__ import annotations

import os

from tether import Context, Node, Registry

RELEASE = os.environ.get("DEPLOY_RELEASE", "1")
FIRST = "plan" if RELEASE == "1" else "outline"

agent = Registry("tests.deploy_agents:agent", entry=FIRST)


@agent.node(FIRST)
async def first(ctx: Context, node: Node) -> str:
    return f"{FIRST} by release {RELEASE}: {node.input}"
