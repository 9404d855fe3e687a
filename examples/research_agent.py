"""A research agent: parallel tools and a sub-agent, on a local scripted model server.

    pip install -e '.[demo]' && python examples/research_agent.py

Swap the model for a real one (`model="openai:gpt-4.1"` with OPENAI_API_KEY set, or
`"anthropic:claude-sonnet-4"` with ANTHROPIC_API_KEY) and drop `base_url`: nothing else changes.
It prints its run id as it starts: kill it at any point and run it again with that id to
resume (`tether show RUN_ID --db sqlite:///.tether/examples.db` shows the run).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

from tether import Budget, Runtime, store_from_url
from tether.agent import Agent, tool
from tether.testing import Message, ToolCall, ToolSpec, Turn, serve_local_models

PAPERS = {
    "checkpointing": ["Chandy-Lamport snapshots", "write-ahead logging"],
    "leases": ["Gray & Cheriton leases", "fencing tokens"],
    "idempotency": ["exactly-once via idempotency keys"],
}


@tool
async def search_papers(topic: str) -> list[str]:
    """Find papers about a topic."""
    await asyncio.sleep(0.2)  # a slow API
    return PAPERS.get(topic, [])


@tool
async def count_citations(title: str) -> int:
    """How often a paper is cited."""
    await asyncio.sleep(0.1)
    return sum(map(ord, title)) % 500


def researcher(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
    """The scripted model: three searches at once, then a reviewer, then an answer."""
    turns = sum(m.role == "assistant" for m in messages)
    if turns == 0:
        return Turn(
            text="Searching three topics in parallel.",
            tool_calls=[ToolCall("search_papers", {"topic": t}) for t in PAPERS],
            latency=0.3,
        )
    if turns == 1:
        found = [m.text for m in messages if m.role == "tool"]
        return Turn(tool_calls=[ToolCall("reviewer", {"task": " ".join(found)})], latency=0.3)
    return Turn(text=f"Summary: {messages[-1].text}", latency=0.3, chunk_delay=0.01)


def reviewer(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
    """The sub-agent's scripted model: count citations of two papers, then judge."""
    turns = sum(m.role == "assistant" for m in messages)
    if turns == 0:
        titles = ["write-ahead logging", "fencing tokens"]
        return Turn(tool_calls=[ToolCall("count_citations", {"title": t}) for t in titles])
    wal, fencing = (int(m.text) for m in messages if m.role == "tool")
    best, other = ("write-ahead logging", "fencing tokens")[:: 1 if wal >= fencing else -1]
    return Turn(text=f"{best} is cited most ({max(wal, fencing)} vs {min(wal, fencing)}; {other}).")


async def main(resume_run_id: str | None) -> None:
    async with serve_local_models({"researcher": researcher, "reviewer": reviewer}) as models:
        review = Agent(
            "example.reviewer",
            model="openai:script:reviewer",
            base_url=models.openai_base_url,
            tools=[count_citations],
            tool_name="reviewer",
            description="Ask the reviewer to weigh a list of papers.",
        )
        research = Agent(
            "example.research",
            model="anthropic:script:researcher",
            base_url=models.anthropic_base_url,
            system="You research distributed-systems literature.",
            tools=[search_papers, review],
            budget=Budget(max_turns=10, max_tokens=50_000),
        )
        async with store_from_url("sqlite:///.tether/examples.db") as store, research:
            runtime = Runtime(store)
            runtime.events.on_event(
                lambda run_id, node_id, e: (
                    print(e["text"], end="", flush=True) if e["type"] == "token" else None
                )
            )
            runtime.events.on_record(
                lambda run_id, seq, record: (
                    print(
                        f"run {run_id} started; kill me any time and resume with:\n"
                        f"  python examples/research_agent.py {run_id}",
                        flush=True,
                    )
                    if record.HasField("run_started") and not record.run_started.parent_run_id
                    else None
                )
            )
            if resume_run_id:
                finished = (await runtime.load(resume_run_id)).finished is not None
                resumed = runtime.outcome if finished else runtime.resume
                outcome = await resumed(resume_run_id)
            else:
                outcome = await research.run(runtime, "Which idea keeps agents alive?")
            print(f"\nrun {outcome.run_id}: {outcome.status.value}")
            for message in await research.transcript(runtime, outcome.run_id):
                calls = [c["name"] for c in message.get("tool_calls", [])]
                text = message["content"][:90]
                print(f"  {message['role']:>9}: {text}" + (f" -> {calls}" if calls else ""))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else None))
