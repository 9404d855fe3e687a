"""The OpenAI Agents SDK on tether: model calls, tool calls and handoffs replay from steps."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import openai
import pytest

pytest.importorskip("agents")

from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    function_tool,
    set_trace_processors,
    set_tracing_disabled,
)

from tests.integrations.test_openai_agents_hitl import Kept
from tether import Runtime, Status, Store
from tether.integrations.openai_agents import DurableRunner
from tether.model.records import decode_log
from tether.testing import (
    LocalModelServer,
    Message,
    ToolCall,
    ToolSpec,
    Turn,
    serve_local_models,
)

# Refunds whose tool body finished; an order whose refund hangs until cancelled (a crash).
REFUNDED: list[str] = []
HANG: dict[str, asyncio.Event] = {}


def triage(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
    return Turn(tool_calls=[ToolCall("transfer_to_billing", {})])


def billing(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
    done = [m.text for m in messages if m.role == "tool" and "refund" in m.text]
    if not done:
        return Turn(tool_calls=[ToolCall("refund", {"order": "A1"})])
    return Turn(text="Done: " + done[0])


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    # Tracing on, as users run it; its spans kept here instead of exported to the network.
    kept = Kept()
    set_trace_processors([kept])
    set_tracing_disabled(False)
    REFUNDED.clear()
    HANG.clear()
    yield
    set_tracing_disabled(True)


@pytest.fixture
async def models() -> AsyncIterator[LocalModelServer]:
    async with serve_local_models({"triage": triage, "billing": billing}) as server:
        yield server


@pytest.fixture
async def client(models: LocalModelServer) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(
        base_url=models.openai_base_url, api_key="local", max_retries=0
    ) as oai:
        yield oai


def support(client: openai.AsyncOpenAI, *, front: str = "triage", **kw: Any) -> DurableRunner:
    @function_tool
    async def refund(order: str) -> str:
        """Refund an order."""
        if order in HANG:
            HANG[order].set()
            await asyncio.Event().wait()
        REFUNDED.append(order)
        return f"refund of {order} issued"

    bill = Agent(
        "billing", model=OpenAIChatCompletionsModel("script:billing", client), tools=[refund]
    )
    desk = Agent(front, model=OpenAIChatCompletionsModel("script:triage", client), handoffs=[bill])
    return DurableRunner(desk, name=kw.pop("name", "test.openai_agents.support"), **kw)


async def steps_of(store: Store, run_id: str) -> list[Any]:
    rows = await store.log.read_all(run_id)
    return [r.step_recorded for r in decode_log(run_id, rows) if r.HasField("step_recorded")]


async def test_model_calls_tool_calls_and_handoffs_are_steps(
    store: Store, models: LocalModelServer, client: openai.AsyncOpenAI
) -> None:
    outcome = await support(client).run("Refund A1", runtime=Runtime(store))
    assert outcome.status is Status.SUCCEEDED, outcome.reason
    assert outcome.result == {"content": "Done: refund of A1 issued", "last_agent": "billing"}
    names = [s.name for s in await steps_of(store, outcome.run_id)]
    assert names == ["triage.model", "billing.model", "billing.tool:refund", "billing.model"]
    assert outcome.graph.model_calls == 3
    assert outcome.graph.tokens == sum(
        r.reply.usage.total_tokens for r in models.requests if r.reply
    )


async def crash_in_refund(store: Store, runner: DurableRunner) -> str:
    reached = HANG["A1"] = asyncio.Event()
    runtime = Runtime(store)
    run_id = await runner.submit("Refund A1", runtime=runtime)
    task = asyncio.ensure_future(runtime.resume(run_id))
    await reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    HANG.clear()
    return run_id


async def test_a_resumed_run_hands_off_again_without_asking_and_refunds_once(
    durable_store: Store, models: LocalModelServer, client: openai.AsyncOpenAI
) -> None:
    run_id = await crash_in_refund(durable_store, support(client))
    assert [r.model for r in models.requests] == ["script:triage", "script:billing"]
    assert REFUNDED == []
    outcome = await Runtime(durable_store).resume(run_id)
    assert outcome.status is Status.SUCCEEDED, outcome.reason
    assert outcome.result["content"] == "Done: refund of A1 issued"
    # Triage and billing's first call were not asked again; the refund finished once.
    assert [r.model for r in models.requests] == ["script:triage"] + ["script:billing"] * 2
    assert REFUNDED == ["A1"]


async def test_an_agent_whose_code_changed_pauses_with_the_non_determinism_error(
    durable_store: Store, models: LocalModelServer, client: openai.AsyncOpenAI
) -> None:
    run_id = await crash_in_refund(durable_store, support(client))
    support(client, front="front_desk")  # deployed again with the first agent renamed
    outcome = await Runtime(durable_store).resume(run_id)
    assert outcome.status is Status.PAUSED
    assert "non-deterministic step 0" in outcome.reason
    assert "'triage.model'" in outcome.reason and "'front_desk.model'" in outcome.reason
    bodies = [
        r.WhichOneof("body") for r in decode_log(run_id, await durable_store.log.read_all(run_id))
    ]
    assert "node_failed" not in bodies and "node_completed" not in bodies


async def test_model_calls_take_from_the_models_shared_rate_limit(
    store: Store, models: LocalModelServer, client: openai.AsyncOpenAI
) -> None:
    from tether.model.run_view import rate_wait_ms
    from tether.store.rates import RateLimit

    # One request a second for both models (one key): the three calls are spaced.
    runner = support(
        client, name="test.openai_agents.rated", rate_key="openai:support",
        rate_limits=[RateLimit("openai:support", requests=1, per=1.0)],
    )  # fmt: skip
    outcome = await runner.run("Refund A1", runtime=Runtime(store))
    assert outcome.status is Status.SUCCEEDED, outcome.reason
    assert rate_wait_ms(outcome.graph) > 1000  # the 2nd and 3rd waited about a second each
    [state] = await store.rates.all()
    assert state.limit == RateLimit("openai:support", requests=1, per=1.0)
    times = sorted(r.at for r in models.requests)
    assert len(times) == 3 and times[2] - times[0] >= 1.5


def test_default_rate_keys_name_the_provider(client: openai.AsyncOpenAI) -> None:
    from agents import Model

    from tether.integrations.openai_agents import rate_key_for

    class AcmeModel(Model):  # another provider's Model class
        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    chat = OpenAIChatCompletionsModel("gpt-4.1", client)
    assert rate_key_for(chat, "gpt-4.1") == "openai:gpt-4.1"
    assert rate_key_for("gpt-4.1", "gpt-4.1") == "openai:gpt-4.1"
    assert rate_key_for("litellm/anthropic/claude", "litellm/anthropic/claude") == (
        "litellm:anthropic/claude"
    )
    assert rate_key_for(AcmeModel(), "gpt-4.1") == "acme:gpt-4.1"
