"""A pydantic-ai agent made durable by tether: model requests and tool calls are journaled steps.

    pip install -e '.[demo,pydantic-ai]' && python examples/pydantic_ai_agent.py "What is WAL?"

It prints its run id. Kill it at any point (even with SIGKILL) and continue where it stopped:

    PYTHONPATH=examples tether resume --wait RUN_ID

The model is the scripted `script:demo` of tether's local model server (it searches twice in
parallel, then answers). With `OPENAI_BASE_URL` unset the example serves it itself; for
`tether resume` in another process, start one first and point both at it:

    python -m tether.testing --port 8765 &
    export OPENAI_BASE_URL=http://127.0.0.1:8765/v1 OPENAI_API_KEY=local

Swap in a real model (`Agent("openai:gpt-4.1", ...)`): nothing else changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from typing import Any

from pydantic_ai import Agent

from tether import Runtime, store_from_url
from tether.integrations.pydantic_ai import TetherAgent, TetherDurability
from tether.store import default_url
from tether.testing import serve_local_models
from tether.testing.demo import DEMO_SCRIPTS

# A model name, not an instance: it is built when first asked, from OPENAI_BASE_URL.
agent = Agent(
    "openai:script:demo",
    name="researcher",
    instructions="Search before you answer.",
    capabilities=[TetherDurability()],
)


@agent.tool_plain
async def search(query: str) -> str:
    """Search the web (a slow API)."""
    await asyncio.sleep(float(os.environ.get("EXAMPLE_SEARCH_DELAY", "0.2")))
    return f"3 articles about {query!r} agree: write-ahead logging makes state durable."


# The name is an import path, so `tether resume` (with examples/ on PYTHONPATH) finds the
# agent in a process of its own.
durable = TetherAgent(agent, name="pydantic_ai_agent:registry")
registry = durable.registry


async def main(argv: list[str]) -> int:
    question = argv[0] if argv else "Which idea keeps agents alive?"
    models: contextlib.AbstractAsyncContextManager[Any] = contextlib.nullcontext()
    if not os.environ.get("OPENAI_BASE_URL"):
        models = serve_local_models(dict(DEMO_SCRIPTS))
    async with models as server:
        if server is not None:
            os.environ["OPENAI_BASE_URL"] = server.openai_base_url
        os.environ.setdefault("OPENAI_API_KEY", "local")
        async with store_from_url(default_url()) as store:
            runtime = Runtime(store)
            # Submitted, then run here: the id is printed before any work, to resume it by.
            run_id = await durable.submit(question, runtime=runtime)
            print(f"run {run_id}", flush=True)
            outcome = await runtime.resume(run_id)
    print(f"run {outcome.run_id}: {outcome.status.value} {outcome.reason}".rstrip())
    print(outcome.result["content"] if outcome.result else "")
    return 0 if outcome.status.value == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
