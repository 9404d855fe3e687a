"""pydantic-ai on tether: model requests and tool calls are journaled steps (real SDK)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

import openai
import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tether import Budget, Runtime, Status, Store
from tether.integrations.pydantic_ai import TetherAgent, TetherDurability
from tether.model.records import decode_log
from tether.testing import (
    LocalModelServer,
    Message,
    ToolCall,
    ToolSpec,
    Turn,
    serve_local_models,
)

# Tool bodies that started and that finished, by city.
STARTED: list[str] = []
FINISHED: list[str] = []
# A city whose lookup hangs until cancelled: a crash in the middle of a tool call.
HANG: dict[str, asyncio.Event] = {}


def forecaster(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
    """Look up two cities at once, then answer with what the tools said."""
    if not any(m.role == "tool" for m in messages):
        return Turn(tool_calls=[ToolCall("forecast", {"city": c}) for c in ("Paris", "Oslo")])
    said = sorted(m.text for m in messages if m.role == "tool")
    return Turn(text="Forecast: " + "; ".join(said))


@pytest.fixture
async def models() -> AsyncIterator[LocalModelServer]:
    async with serve_local_models({"forecaster": forecaster}) as server:
        yield server


@pytest.fixture
async def client(models: LocalModelServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=models.openai_base_url, api_key="local", max_retries=0
    ) as oai:
        yield oai


@pytest.fixture(autouse=True)
def _reset() -> None:
    STARTED.clear()
    FINISHED.clear()
    HANG.clear()


def weather_agent(client: openai.AsyncOpenAI, *, tool_name: str = "forecast") -> TetherAgent:
    model = OpenAIChatModel("script:forecaster", provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, name="weather", capabilities=[TetherDurability()])

    async def lookup(city: str) -> str:
        STARTED.append(city)
        if city in HANG:
            HANG[city].set()
            await asyncio.Event().wait()
        FINISHED.append(city)
        return f"{city} sunny"

    agent.tool_plain(name=tool_name)(lookup)
    return TetherAgent(agent, name="test.pydantic_ai.weather")


async def steps_of(store: Store, run_id: str) -> list[Any]:
    rows = await store.log.read_all(run_id)
    return [r.step_recorded for r in decode_log(run_id, rows) if r.HasField("step_recorded")]


async def test_model_requests_and_tool_calls_are_recorded_steps(
    store: Store, models: LocalModelServer, client: openai.AsyncOpenAI
) -> None:
    outcome = await weather_agent(client).run("Weather?", runtime=Runtime(store))
    assert outcome.status is Status.SUCCEEDED, outcome.reason
    assert outcome.result["content"] == "Forecast: Oslo sunny; Paris sunny"
    names = [s.name for s in await steps_of(store, outcome.run_id)]
    assert names[0] == "weather__model.request"
    assert sorted(names[1:3]) == ["weather__function_toolset__<agent>.call_tool:forecast"] * 2
    assert names[3] == "weather__model.request"
    # Both model calls count against the run's budget, with their tokens.
    assert outcome.graph.model_calls == 2
    reported = sum(r.reply.usage.total_tokens for r in models.requests if r.reply)
    assert outcome.graph.tokens == reported > 0


async def test_a_turn_limit_pauses_between_model_requests_and_resumes(
    store: Store, models: LocalModelServer, client: openai.AsyncOpenAI
) -> None:
    durable = weather_agent(client)
    outcome = await durable.run("Weather?", runtime=Runtime(store), budget=Budget(max_turns=1))
    assert outcome.status is Status.PAUSED and "turn limit 1" in outcome.reason
    assert len(models.requests) == 1
    done = await Runtime(store).resume(outcome.run_id, budget=Budget(max_turns=5))
    assert done.status is Status.SUCCEEDED
    assert len(models.requests) == 2  # the first request was not asked again
    assert sorted(FINISHED) == ["Oslo", "Paris"]


async def crash_in_tool(store: Store, durable: TetherAgent, city: str) -> str:
    """Start a run and stop it (nothing more recorded) while `city`'s lookup runs."""
    reached = HANG[city] = asyncio.Event()
    runtime = Runtime(store)
    run_id = await durable.submit("Weather?", runtime=runtime)
    task = asyncio.ensure_future(runtime.resume(run_id))
    await reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    HANG.clear()
    return run_id


async def test_a_resumed_run_asks_nothing_recorded_and_ends_as_an_uninterrupted_one(
    durable_store: Store, models: LocalModelServer, client: openai.AsyncOpenAI
) -> None:
    durable = weather_agent(client)
    whole = await durable.run("Weather?", runtime=Runtime(durable_store))
    asked_whole = [r.turn_index for r in models.requests]
    models.reset()
    run_id = await crash_in_tool(durable_store, durable, "Oslo")
    assert [r.turn_index for r in models.requests] == [0]
    resumed = await Runtime(durable_store).resume(run_id)
    assert resumed.status is Status.SUCCEEDED
    assert resumed.result == whole.result
    # The recorded model request was not asked again: the same requests as the whole run.
    assert [r.turn_index for r in models.requests] == asked_whole == [0, 1]
    # Paris's lookup, recorded before the crash or not, finished once per recording.
    steps = await steps_of(durable_store, run_id)
    assert len([s for s in steps if "call_tool" in s.name]) == 2


async def test_an_agent_whose_code_changed_pauses_with_the_non_determinism_error(
    durable_store: Store, models: LocalModelServer, client: openai.AsyncOpenAI
) -> None:
    run_id = await crash_in_tool(durable_store, weather_agent(client), "Oslo")
    # Deployed again with the tool renamed: its recorded steps no longer match.
    weather_agent(client, tool_name="forecast_v2")
    outcome = await Runtime(durable_store).resume(run_id)
    assert outcome.status is Status.PAUSED
    assert "non-deterministic step" in outcome.reason
    # The recorded model response calls `forecast`, which the new code no longer has, so
    # pydantic-ai asks the model again where the log recorded the tool call.
    assert "recorded step 'weather__function_toolset__<agent>.call_tool:forecast'" in outcome.reason
    assert "now asks for 'weather__model.request'" in outcome.reason
    bodies = [
        r.WhichOneof("body") for r in decode_log(run_id, await durable_store.log.read_all(run_id))
    ]
    assert "node_failed" not in bodies and "node_completed" not in bodies


async def test_outside_a_tether_node_the_agent_runs_as_usual(client: openai.AsyncOpenAI) -> None:
    result = await weather_agent(client).agent.run("Weather?")
    assert result.output == "Forecast: Oslo sunny; Paris sunny"


async def test_a_conversation_rebuilds_its_history_from_steps(
    store: Store, models: LocalModelServer, client: openai.AsyncOpenAI
) -> None:
    models.scripts.add(
        "chat", lambda messages, tools: Turn(text=f"turn {sum(m.role == 'user' for m in messages)}")
    )
    model = OpenAIChatModel("script:chat", provider=OpenAIProvider(openai_client=client))
    chat = TetherAgent(
        Agent(model, name="chat", capabilities=[TetherDurability()]), name="test.pydantic_ai.chat"
    )
    outcome = await chat.run(["hi", "and?", "bye"], runtime=Runtime(store))
    assert outcome.result["outputs"] == ["turn 1", "turn 2", "turn 3"]
    # Each request carried the history before it, and the log holds only the three steps.
    assert [sum(m["role"] == "user" for m in r.body["messages"]) for r in models.requests] == [
        1,
        2,
        3,
    ]
    assert len(await steps_of(store, outcome.run_id)) == 3


def test_an_agent_without_the_capability_is_refused() -> None:
    with pytest.raises(TypeError, match="TetherDurability"):
        TetherAgent(Agent("test", name="plain"))


async def test_mcp_tool_listing_and_calls_are_steps(
    sqlite_store: Store, models: LocalModelServer, client: openai.AsyncOpenAI
) -> None:
    from pydantic_ai.mcp import MCPToolset, StdioTransport

    from tests.integrations.test_mcp import SERVER, clerk

    models.scripts.add("clerk", clerk("inventory"))
    server = StdioTransport(command=sys.executable, args=[str(SERVER)])
    # A loaded machine can take seconds to start a Python process.
    toolset = MCPToolset(server, id="inventory", init_timeout=120)
    model = OpenAIChatModel("script:clerk", provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, name="clerk", toolsets=[toolset], capabilities=[TetherDurability()])
    outcome = await TetherAgent(agent, name="test.pydantic_ai.clerk").run(
        "How many bolts?", runtime=Runtime(sqlite_store)
    )
    assert outcome.status is Status.SUCCEEDED, outcome.reason
    assert outcome.result["content"] == "Stock: bolts: 120 in stock"
    names = [s.name for s in await steps_of(sqlite_store, outcome.run_id)]
    assert names == [
        "clerk__mcp_server__inventory.get_tools",
        "clerk__model.request",
        "clerk__mcp_server__inventory.call_tool",
        "clerk__model.request",
    ]


async def test_streamed_tokens_reach_the_event_stream_and_are_never_logged(
    store: Store, models: LocalModelServer, client: openai.AsyncOpenAI
) -> None:
    model = OpenAIChatModel("script:forecaster", provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, name="weather", capabilities=[TetherDurability(stream_tokens=True)])
    agent.tool_plain(name="forecast")(lambda city: f"{city} sunny")
    runtime = Runtime(store)
    tokens: list[str] = []
    runtime.events.on_event(
        lambda run_id, node_id, e: tokens.append(e["text"]) if e["type"] == "token" else None
    )
    durable = TetherAgent(agent, name="test.pydantic_ai.streaming")
    outcome = await durable.run("Weather?", runtime=runtime)
    assert outcome.status is Status.SUCCEEDED, outcome.reason
    assert "".join(tokens) == outcome.result["content"] == "Forecast: Oslo sunny; Paris sunny"
    assert all(r.stream for r in models.requests)
    # Tokens are no records: the log holds whole model responses, tool calls and tool events.
    names = {s.name for s in await steps_of(store, outcome.run_id)}
    assert names == {
        "weather__model.request_stream",
        "weather__function_toolset__<agent>.call_tool:forecast",
        "weather__event_stream_handler",
    }


def cleaner(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
    said = [m.text for m in messages if m.role == "tool"]
    if not said:
        return Turn(
            tool_calls=[
                ToolCall("delete_file", {"path": "/tmp/a"}),
                ToolCall("delete_file", {"path": "/etc/passwd"}),
            ]
        )
    return Turn(text="Done: " + " | ".join(said))


async def test_tools_that_need_approval_wait_durably_for_a_person(
    durable_store: Store, models: LocalModelServer, client: openai.AsyncOpenAI
) -> None:
    from pydantic_ai import DeferredToolRequests

    models.scripts.add("cleaner", cleaner)
    model = OpenAIChatModel("script:cleaner", provider=OpenAIProvider(openai_client=client))
    agent = Agent(
        model,
        name="cleaner",
        output_type=[str, DeferredToolRequests],
        capabilities=[TetherDurability()],
    )
    deleted: list[str] = []

    @agent.tool_plain(requires_approval=True)
    def delete_file(path: str) -> str:
        """Delete a file."""
        deleted.append(path)
        return f"deleted {path}"

    durable = TetherAgent(agent, name="test.pydantic_ai.cleaner")
    rt = Runtime(durable_store)
    parked = await durable.run("Clean up.", runtime=rt)
    assert parked.status is Status.WAITING, parked.reason
    waits = {w.key: w for w in parked.graph.pending_waits()}
    asked = {
        (await rt.new_codec().decode(w.spec.data))["arguments"]["path"]: k for k, w in waits.items()
    }
    assert set(asked) == {"/tmp/a", "/etc/passwd"} and deleted == []
    await rt.signal(parked.run_id, asked["/tmp/a"], {"approve": True})
    await rt.signal(
        parked.run_id, asked["/etc/passwd"], {"approve": False, "reason": "never touch /etc"}
    )
    # Another process (a fresh runtime) takes it up: the history comes from the log.
    done = await Runtime(durable_store).resume(parked.run_id)
    assert done.status is Status.SUCCEEDED, done.reason
    assert deleted == ["/tmp/a"]
    assert done.result["content"] == ("Done: deleted /tmp/a | not run: rejected (never touch /etc)")
    # The model was asked twice in all: once before the approvals, once after.
    assert [r.turn_index for r in models.requests] == [0, 1]


async def test_model_requests_take_from_the_models_shared_rate_limit(
    store: Store, models: LocalModelServer, client: openai.AsyncOpenAI
) -> None:
    from tether.model.run_view import rate_wait_ms
    from tether.store.rates import RateLimit

    # One request a second for the model, by its provider and name: the 2nd waits.
    await store.rates.set(RateLimit("openai:script:forecaster", requests=1, per=1.0))
    outcome = await weather_agent(client).run("Weather?", runtime=Runtime(store))
    assert outcome.status is Status.SUCCEEDED, outcome.reason
    assert rate_wait_ms(outcome.graph) > 500
    times = sorted(r.at for r in models.requests)
    assert len(times) == 2 and times[1] - times[0] >= 0.9


def dispatcher(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
    said = [m.text for m in messages if m.role == "tool"]
    if not said:
        return Turn(
            tool_calls=[
                ToolCall("ship", {"order": "A1"}),
                ToolCall("ship", {"order": "B2"}),
            ]
        )
    return Turn(text="Shipping: " + " | ".join(said))


async def test_deferred_external_calls_park_the_run_until_their_results_are_delivered(
    durable_store: Store, models: LocalModelServer, client: openai.AsyncOpenAI
) -> None:
    from pydantic_ai import CallDeferred, DeferredToolRequests

    models.scripts.add("dispatcher", dispatcher)
    model = OpenAIChatModel("script:dispatcher", provider=OpenAIProvider(openai_client=client))
    agent = Agent(
        model,
        name="dispatcher",
        output_type=[str, DeferredToolRequests],
        capabilities=[TetherDurability()],
    )
    ran: list[str] = []

    @agent.tool_plain
    def ship(order: str) -> str:
        """Ship an order: done by the warehouse system, which reports back."""
        ran.append(order)
        raise CallDeferred(metadata={"queue": "warehouse"})

    durable = TetherAgent(agent, name="test.pydantic_ai.dispatcher")
    rt = Runtime(durable_store)
    parked = await durable.run("Ship A1 and B2.", runtime=rt)
    assert parked.status is Status.WAITING, parked.reason
    # Parked: no owner, no lease, nothing executing; one wait per call with what it asks.
    info = await durable_store.runs.get(parked.run_id)
    assert info is not None and info.status is Status.WAITING and info.owner is None
    codec = rt.new_codec()
    asked = {}
    for key, wait in {w.key: w for w in parked.graph.pending_waits()}.items():
        data = await codec.decode(wait.spec.data)
        assert data["tool"] == "ship" and data["kind"] == "external"
        assert data["metadata"] == {"queue": "warehouse"}
        asked[data["arguments"]["order"]] = key
    assert set(asked) == {"A1", "B2"} and sorted(ran) == ["A1", "B2"]  # called concurrently
    # Results come from elsewhere: one value, one failure. A malformed one is refused.
    from tether.foundation.errors import BadEventPayload

    with pytest.raises(BadEventPayload):
        await rt.signal(parked.run_id, asked["A1"], {"status": "shipped"})
    await rt.signal(parked.run_id, asked["A1"], {"result": {"tracking": "TRK-1"}})
    await rt.signal(parked.run_id, asked["B2"], {"error": "out of stock"})
    # Another process (a fresh runtime, as after a restart) takes it up.
    done = await Runtime(durable_store).resume(parked.run_id)
    assert done.status is Status.SUCCEEDED, done.reason
    assert sorted(ran) == ["A1", "B2"]  # the tool is not called again: the results stand for it
    content = done.result["content"]
    assert content.startswith("Shipping: ") and "TRK-1" in content and "out of stock" in content
    assert [r.turn_index for r in models.requests] == [0, 1]


async def test_two_providers_serving_one_model_name_take_from_two_meters(
    durable_store: Store, models: LocalModelServer, client: openai.AsyncOpenAI
) -> None:
    import anthropic
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    from tether.store.rates import RateLimit

    # A meter per provider (a request a second each): the OpenAI-served agent's requests
    # move only the "openai:" meter, the Anthropic-served one's only the "anthropic:" one.
    for key in ("openai:script:forecaster", "anthropic:script:forecaster"):
        await durable_store.rates.set(RateLimit(key, requests=1, per=1.0))
    rt = Runtime(durable_store)
    first = await weather_agent(client).run("Weather?", runtime=rt)
    assert first.status is Status.SUCCEEDED, first.reason
    meters = {m.limit.key: m for m in await durable_store.rates.all() if m.limit}
    assert meters["openai:script:forecaster"].requests_at > 0
    assert meters["anthropic:script:forecaster"].requests_at == 0
    async with anthropic.AsyncAnthropic(
        base_url=models.anthropic_base_url, api_key="local", max_retries=0
    ) as claude:
        model = AnthropicModel(
            "script:forecaster", provider=AnthropicProvider(anthropic_client=claude)
        )
        agent = Agent(model, name="weather", capabilities=[TetherDurability()])

        @agent.tool_plain
        def forecast(city: str) -> str:
            return f"{city} sunny"

        second = await TetherAgent(agent, name="test.pydantic_ai.claude").run(
            "Weather?", runtime=rt
        )
    assert second.status is Status.SUCCEEDED, second.reason
    assert second.result["content"] == "Forecast: Oslo sunny; Paris sunny"
    meters = {m.limit.key: m for m in await durable_store.rates.all() if m.limit}
    assert meters["anthropic:script:forecaster"].requests_at > 0
    assert [r.api for r in models.requests].count("anthropic.messages") == 2
