"""An OpenAI Agents SDK agent made durable by tether: model and tool calls are journaled steps.

    pip install -e '.[demo,openai-agents]' && python examples/openai_agents_agent.py "What is WAL?"

It prints its run id. Kill it at any point (even with SIGKILL) and continue where it stopped:

    PYTHONPATH=examples tether resume --wait RUN_ID

The model is the scripted `script:demo` of tether's local model server (two searches in
parallel, then an answer), over Chat Completions. With `OPENAI_BASE_URL` unset the example
serves it itself; for `tether resume` in another process, start one and point both at it:

    python -m tether.testing --port 8765 &
    export OPENAI_BASE_URL=http://127.0.0.1:8765/v1 OPENAI_API_KEY=local
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from typing import Any

from agents import Agent, OpenAIProvider, function_tool, set_tracing_disabled

from tether import Runtime, store_from_url
from tether.integrations.openai_agents import DurableRunner
from tether.store import default_url
from tether.testing import serve_local_models
from tether.testing.demo import DEMO_SCRIPTS

# The SDK exports traces to OpenAI by default; a local example has nowhere to send them.
set_tracing_disabled(True)


@function_tool
async def search(query: str) -> str:
    """Search the web (a slow API)."""
    await asyncio.sleep(float(os.environ.get("EXAMPLE_SEARCH_DELAY", "0.2")))
    return f"3 articles about {query!r} agree: write-ahead logging makes state durable."


agent = Agent("researcher", instructions="Search before you answer.", tools=[search])
# A model name, resolved on first use from OPENAI_BASE_URL (the SDK's Chat Completions client).
agent.model = "script:demo"

# The name is an import path, so `tether resume` (with examples/ on PYTHONPATH) finds it.
runner = DurableRunner(
    agent,
    name="openai_agents_agent:registry",
    model_provider=OpenAIProvider(use_responses=False),
)
registry = runner.registry


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
            run_id = await runner.submit(question, runtime=runtime)
            print(f"run {run_id}", flush=True)
            outcome = await runtime.resume(run_id)
    print(f"run {outcome.run_id}: {outcome.status.value} {outcome.reason}".rstrip())
    print(outcome.result["content"] if outcome.result else "")
    return 0 if outcome.status.value == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
