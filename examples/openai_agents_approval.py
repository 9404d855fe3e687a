"""An OpenAI Agents SDK agent whose tool needs a person's approval, on tether's durable waits.

    pip install -e '.[demo,openai-agents]'
    python -m tether.testing --port 8765 &            # the local scripted model server
    export OPENAI_BASE_URL=http://127.0.0.1:8765/v1 OPENAI_API_KEY=local
    python examples/openai_agents_approval.py "What is WAL?"

Each search is a paid call that needs approval (`needs_approval=True`). The run asks, then
parks: no process holds it, so this one exits. It prints one `tether signal` line per
call; answer them from anywhere (another shell, the API, the page's approval card), even
after a restart, then let a worker or `tether resume` go on:

    tether signal RUN_ID KEY --data '{"approve": true}'
    tether signal RUN_ID KEY --data '{"approve": false, "reason": "too expensive"}'
    PYTHONPATH=examples tether resume --wait RUN_ID

With `--yes` it approves every call itself and finishes in one command (serving the model
itself when `OPENAI_BASE_URL` is unset).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from typing import Any

from agents import Agent, OpenAIProvider, function_tool, set_tracing_disabled

from tether import Runtime, Status, store_from_url
from tether.integrations.openai_agents import DurableRunner
from tether.store import default_url
from tether.testing import serve_local_models
from tether.testing.demo import DEMO_SCRIPTS

# The SDK exports traces to OpenAI by default; a local example has nowhere to send them.
set_tracing_disabled(True)


@function_tool(needs_approval=True)
async def search(query: str) -> str:
    """Search the web (a paid API: each call needs approval)."""
    return f"3 articles about {query!r} agree: write-ahead logging makes state durable."


agent = Agent("researcher", instructions="Search before you answer.", tools=[search])
agent.model = "script:demo"  # resolved on first use from OPENAI_BASE_URL (Chat Completions)

# The name is an import path, so `tether resume` (with examples/ on PYTHONPATH) finds it.
runner = DurableRunner(
    agent,
    name="openai_agents_approval:registry",
    model_provider=OpenAIProvider(use_responses=False),
)
registry = runner.registry


async def main(argv: list[str]) -> int:
    approve_all = "--yes" in argv
    words = [a for a in argv if a != "--yes"]
    question = words[0] if words else "Which idea keeps agents alive?"
    models: contextlib.AbstractAsyncContextManager[Any] = contextlib.nullcontext()
    if not os.environ.get("OPENAI_BASE_URL"):
        models = serve_local_models(dict(DEMO_SCRIPTS))
    async with models as server:
        if server is not None:
            os.environ["OPENAI_BASE_URL"] = server.openai_base_url
        os.environ.setdefault("OPENAI_API_KEY", "local")
        async with store_from_url(default_url()) as store:
            runtime = Runtime(store)
            run_id = await runner.submit(question, runtime=runtime)
            print(f"run {run_id}", flush=True)
            outcome = await runtime.resume(run_id)
            if outcome.status is Status.WAITING:
                codec = runtime.new_codec()
                for wait in outcome.graph.pending_waits():
                    asked = await codec.decode(wait.spec.data)
                    print(f"approve? {asked['tool']} {json.dumps(asked['arguments'])}")
                    print(f"  tether signal {run_id} {wait.key} --data '{{\"approve\": true}}'")
                    if approve_all:
                        await runtime.signal(run_id, wait.key, {"approve": True})
                if not approve_all:
                    print(f"then: PYTHONPATH=examples tether resume --wait {run_id}", flush=True)
                    return 0
                outcome = await runtime.resume(run_id)
    print(f"run {outcome.run_id}: {outcome.status.value} {outcome.reason}".rstrip())
    print(outcome.result["content"] if outcome.result else "")
    return 0 if outcome.status.value == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
