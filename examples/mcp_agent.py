"""A tether agent whose tools come from an MCP server, on the local scripted model server.

    pip install -e '.[demo,mcp]' && python examples/mcp_agent.py

The MCP server (examples/mcp_inventory_server.py) is started once, as a subprocess over stdio,
and its tools are listed once; each tool call is a node of the run, retried by the server's
Retry policy if the server dies mid-call. `python examples/mcp_agent.py RUN_ID` resumes a run.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from tether import Runtime, store_from_url
from tether.agent import Agent, mcp_server
from tether.testing import Message, ToolCall, ToolSpec, Turn, serve_local_models

SERVER = Path(__file__).parent / "mcp_inventory_server.py"


def clerk(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
    """The scripted model: look up two items at once, then answer from what the tool said."""
    said = [m.text for m in messages if m.role == "tool"]
    if not said:
        return Turn(tool_calls=[ToolCall("inventory", {"item": i}) for i in ("bolts", "washers")])
    return Turn(text="In stock: " + "; ".join(said))


async def main(resume_run_id: str | None) -> int:
    async with serve_local_models({"clerk": clerk}) as models:
        agent = Agent(
            "example.mcp_clerk",
            model="openai:script:clerk",
            base_url=models.openai_base_url,
            api_key="local",
            tools=[mcp_server(sys.executable, str(SERVER), name="inventory")],
        )
        async with store_from_url("sqlite:///.tether/examples.db") as store, agent:
            runtime = Runtime(store)
            if resume_run_id:
                outcome = await runtime.resume(resume_run_id)
            else:
                outcome = await agent.run(runtime, "Do we have bolts and washers?")
    print(f"run {outcome.run_id}: {outcome.status.value}")
    print(outcome.result["content"] if outcome.result else outcome.reason)
    return 0 if outcome.status.value == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else None)))
