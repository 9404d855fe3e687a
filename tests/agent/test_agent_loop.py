"""The agent layer on the real OpenAI and Anthropic SDKs, against the local model server.

Every scenario (faults, crashes, budgets) must end with the same transcript as an
uninterrupted run.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from tether import Budget, Runtime, Status, Store
from tether.agent import Agent, tool
from tether.testing import (
    ClientError,
    CutStream,
    LocalModelServer,
    Message,
    RateLimited,
    ServerError,
    ToolCall,
    ToolSpec,
    Turn,
)

FLAKY_CALLS: list[str] = []


@tool
async def search(query: str, limit: int = 3) -> list[str]:
    """Search the corpus."""
    await asyncio.sleep(0.01)
    return [f"{query}-{i}" for i in range(limit)]


@tool
async def lookup(id: int) -> dict[str, Any]:
    """Look a record up by id."""
    return {"id": id, "name": f"record {id}"}


@tool
async def flaky(note: str) -> str:
    """A tool that always fails."""
    FLAKY_CALLS.append(note)
    raise RuntimeError(f"backend down for {note!r}")


@tool
async def score(text: str) -> int:
    """Score a text."""
    return len(text)


def research(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Turn:
    """Three parallel tools, then a sub-agent + a failing tool + bad arguments, then an answer."""
    turns = sum(m.role == "assistant" for m in messages)
    results = [m.text for m in messages if m.role == "tool"]
    if turns == 0:
        return Turn(
            text="Looking things up.",
            tool_calls=[
                ToolCall("search", {"query": "tether"}),
                ToolCall("search", {"query": "durable", "limit": 2}),
                ToolCall("lookup", {"id": 7}),
            ],
        )
    if turns == 1:
        return Turn(
            text="Delegating the analysis while I check two more things.",
            tool_calls=[
                ToolCall("analyst", {"task": f"analyse {len(results)} results"}),
                ToolCall("flaky", {"note": "x"}),
                ToolCall("search", {"query": 123}),
            ],
            chunk_delay=0.01,
        )
    return Turn(text="Final answer from: " + " | ".join(results))


def analyst(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Turn:
    turns = sum(m.role == "assistant" for m in messages)
    if turns == 0:
        return Turn(tool_calls=[ToolCall("score", {"text": messages[-1].text})])
    return Turn(text=f"analysis: score {messages[-1].text}")


@pytest.fixture
async def models() -> AsyncIterator[LocalModelServer]:
    from tether.testing import serve_local_models

    async with serve_local_models({"research": research, "analyst": analyst}) as server:
        yield server


@pytest.fixture(autouse=True)
async def close_agents() -> AsyncIterator[None]:
    yield
    for agent in OPENED:
        await agent.aclose()
    OPENED.clear()


OPENED: list[Agent] = []


def make_agent(provider: str, models: LocalModelServer, **kw: Any) -> Agent:
    base = models.openai_base_url if provider == "openai" else models.anthropic_base_url
    sub = Agent(
        f"test-analyst-{provider}",
        model=f"{provider}:script:analyst",
        tools=[score],
        base_url=base,
        description="Hand an analysis task to the analyst.",
        tool_name="analyst",
    )
    agent = Agent(
        f"test-research-{provider}",
        model=f"{provider}:script:research",
        system="You are a careful researcher.",
        tools=[search, lookup, flaky, sub],
        base_url=base,
        **kw,
    )
    OPENED.append(agent)
    return agent


PROVIDERS = pytest.mark.parametrize("provider", ["openai", "anthropic"])


async def reference(provider: str, models: LocalModelServer, store: Store) -> list[Any]:
    agent = make_agent(provider, models)
    rt = Runtime(store)
    outcome = await agent.run(rt, "Research tether.")
    assert outcome.status is Status.SUCCEEDED, outcome.reason
    transcript = await agent.transcript(rt, outcome.run_id)
    models.reset()
    return transcript


@PROVIDERS
async def test_parallel_tools_subagent_failures_and_bad_arguments(
    provider: str, models: LocalModelServer, store: Store
) -> None:
    agent = make_agent(provider, models)
    rt = Runtime(store)
    outcome = await agent.run(rt, "Research tether.")
    assert outcome.status is Status.SUCCEEDED, outcome.reason
    t = await agent.transcript(rt, outcome.run_id)
    roles = [m["role"] for m in t]
    assert roles == ["user", "assistant", "tool", "tool", "tool", "assistant", "tool", "tool",
                     "tool", "assistant"]  # fmt: skip
    assert [c["name"] for c in t[1]["tool_calls"]] == ["search", "search", "lookup"]
    assert t[2]["content"] == '["tether-0", "tether-1", "tether-2"]'
    assert t[3]["content"] == '["durable-0", "durable-1"]'
    assert t[4]["content"] == '{"id": 7, "name": "record 7"}'
    assert t[6]["content"] == "analysis: score 17"  # the sub-agent's answer
    assert t[7]["is_error"] and "RuntimeError: backend down for 'x'" in t[7]["content"]
    assert t[8]["is_error"] and "query: Input should be a valid string" in t[8]["content"]
    assert outcome.result["content"].startswith('Final answer from: ["tether-0"')
    # Tokens and turns are counted from the providers' usage; the sub-agent's count too.
    g = outcome.graph
    assert g.model_calls == 3 + 2 and g.tokens_in > 0 and g.tokens_out > 0
    children = [r for r in await store.runs.list() if r.parent_run_id == outcome.run_id]
    assert len(children) == 1 and children[0].status is Status.SUCCEEDED


@PROVIDERS
async def test_rate_limit_is_retried_after_retry_after(
    provider: str, models: LocalModelServer, store: Store
) -> None:
    expected = await reference(provider, models, store)
    models.inject(RateLimited(retry_after=0.05), ServerError(503, retry_after=0.02))
    agent = make_agent(provider, models)
    rt = Runtime(store)
    retries: list[dict[str, Any]] = []
    rt.events.on_event(
        lambda run_id, node_id, e: retries.append(e) if e["type"] == "model_retry" else None
    )
    outcome = await agent.run(rt, "Research tether.")
    assert outcome.status is Status.SUCCEEDED
    assert await agent.transcript(rt, outcome.run_id) == expected
    assert [r["delay"] for r in retries] == [0.05, 0.02]
    assert [r.status for r in models.requests][:3] == [429, 503, 200]


@PROVIDERS
async def test_a_stream_cut_mid_turn_is_retried(
    provider: str, models: LocalModelServer, store: Store
) -> None:
    expected = await reference(provider, models, store)
    models.inject(CutStream(after_events=3))
    agent = make_agent(provider, models)
    rt = Runtime(store)
    outcome = await agent.run(rt, "Research tether.")
    assert outcome.status is Status.SUCCEEDED
    assert await agent.transcript(rt, outcome.run_id) == expected


@PROVIDERS
async def test_a_turn_that_dies_mid_stream_reruns_on_resume(
    provider: str, models: LocalModelServer, store: Store
) -> None:
    expected = await reference(provider, models, store)
    agent = make_agent(provider, models)
    rt = Runtime(store)
    task = asyncio.ensure_future(agent.run(rt, "Research tether."))
    streaming = asyncio.Event()
    turns_recorded = 0

    def on_record(run_id: str, seq: int, record: Any) -> None:
        nonlocal turns_recorded
        if record.WhichOneof("body") == "node_completed" and record.node_completed.kind == "turn":
            turns_recorded += 1

    def on_event(run_id: str, node_id: str, event: dict[str, Any]) -> None:
        # The second turn streams slowly: die at its first token, in the middle of the reply.
        if turns_recorded == 1 and event["type"] == "token":
            streaming.set()

    rt.events.on_record(on_record)
    rt.events.on_event(on_event)
    await streaming.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    run_id = next(r.run_id for r in await store.runs.list() if r.parent_run_id is None)
    assert (await store.runs.get(run_id)).status is Status.RUNNING  # type: ignore[union-attr]
    outcome = await Runtime(store).resume(run_id)
    assert outcome.status is Status.SUCCEEDED
    assert await agent.transcript(rt, run_id) == expected
    # The interrupted turn was asked twice: once cut off, once on resume.
    second_turn = [r for r in models.requests_for("script:research") if r.turn_index == 1]
    assert len(second_turn) == 2


@PROVIDERS
async def test_budget_exhaustion_pauses_and_resumes_with_more(
    provider: str, models: LocalModelServer, store: Store
) -> None:
    expected = await reference(provider, models, store)
    agent = make_agent(provider, models, budget=Budget(max_turns=1))
    rt = Runtime(store)
    paused = await agent.run(rt, "Research tether.")
    assert paused.status is Status.PAUSED
    assert paused.reason == "budget: turn limit 1 reached"
    # The limit acts at the node boundary: the first turn is recorded, its tools wait.
    assert [paused.graph.nodes[n].spec.kind for n in paused.graph.order] == ["turn"]
    done = await Runtime(store).resume(paused.run_id, budget=Budget(max_turns=10))
    assert done.status is Status.SUCCEEDED
    assert await agent.transcript(rt, paused.run_id) == expected


@PROVIDERS
async def test_tokens_stream_to_listeners_and_never_to_the_log(
    provider: str, models: LocalModelServer, store: Store
) -> None:
    agent = make_agent(provider, models)
    rt = Runtime(store)
    tokens: list[str] = []
    rt.events.on_event(
        lambda run_id, node_id, e: tokens.append(e["text"]) if e["type"] == "token" else None
    )
    outcome = await agent.run(rt, "Research tether.")
    final = outcome.result["content"]
    assert final in "".join(tokens)
    assert len(tokens) > 3  # streamed in pieces, not as one blob
    # The log holds the run's start, one record per node and its end: no token ever.
    rows = await store.log.read_all(outcome.run_id)
    g = outcome.graph
    failed = sum(1 for state in g.nodes.values() if state.failed is not None)
    assert failed == 1  # the flaky tool's last attempt, before its fallback answered
    assert len(rows) == 2 + g.completed_count + failed


@PROVIDERS
async def test_a_model_the_provider_does_not_know_pauses_the_run(
    provider: str, models: LocalModelServer, store: Store
) -> None:
    # A configuration error, not the handler's: the run pauses (nothing recorded for the
    # turn) until the model name or the base URL is fixed and the run resumed.
    base = models.openai_base_url if provider == "openai" else models.anthropic_base_url
    agent = Agent(f"test-missing-{provider}", model=f"{provider}:script:nope", base_url=base)
    OPENED.append(agent)
    outcome = await agent.run(Runtime(store), "hello")
    assert outcome.status is Status.PAUSED
    assert outcome.reason.startswith(
        f"model {provider}:script:nope: the provider does not know this model or endpoint (HTTP 404"
    )
    assert "nope" in outcome.reason and "then resume the run" in outcome.reason
    assert len(models.requests_for("script:nope")) == 1  # not retried


@PROVIDERS
async def test_a_request_the_provider_refuses_fails_the_node_with_its_message(
    provider: str, models: LocalModelServer, store: Store
) -> None:
    models.inject(ClientError(400, "context too long (scripted)"))
    agent = make_agent(provider, models)
    outcome = await agent.run(Runtime(store), "Research tether.")
    assert outcome.status is Status.FAILED
    assert "ModelError: model call failed (400)" in outcome.reason
    assert "context too long" in outcome.reason
