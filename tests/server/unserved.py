"""An agent that imports fine but that no test server is started with (issue 39): importing
this module, or running its handler, leaves a line in the file `TETHER_TEST_UNSERVED` names
(set only in the server subprocess's environment), so a test can see that neither happened."""

from __future__ import annotations

import os
from pathlib import Path

from tether import Context, Node, NodeResult, Registry


def _mark(what: str) -> None:
    if marker := os.environ.get("TETHER_TEST_UNSERVED"):
        with Path(marker).open("a") as f:
            f.write(what + "\n")


_mark("imported")

agent = Registry("test.server.unserved", entry="step")


@agent.node("step")
async def step(ctx: Context, node: Node) -> NodeResult:
    _mark("ran")
    return NodeResult({"taken": True}, is_result=True)
