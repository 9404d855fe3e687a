"""The official openai SDK against the local model server: the Responses API."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import openai
import pytest

from tether.testing import (
    CutStream,
    LocalModelServer,
    Message,
    ToolCall,
    ToolSpec,
    Turn,
    Usage,
)

TOOLS: list[Any] = [
    {"type": "function", "name": "search", "parameters": {"type": "object"}, "strict": False}
]
PARALLEL = Turn(
    text="Two searches.",
    tool_calls=[ToolCall("search", {"q": "alpha"}), ToolCall("search", {"q": "beta", "k": 3})],
    usage=Usage(10, 20),
)


def search_script(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
    if not any(m.role == "assistant" for m in messages):
        return PARALLEL
    system = next((m.text for m in messages if m.role == "system"), "")
    results = [f"{m.tool_call_id}={m.text}" for m in messages if m.role == "tool"]
    return Turn(text=f"[{system}] " + " | ".join(results))


async def test_text_input_and_output_text(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    models.scripts.add("hi", [Turn(text="Hi there.", usage=Usage(2, 3))])

    response = await oai.responses.create(model="script:hi", input="hello")

    assert response.output_text == "Hi there."
    assert response.status == "completed"
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (2, 3)


async def test_parallel_function_calls_round_trip(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    models.scripts.add("search", search_script)

    first = await oai.responses.create(
        model="script:search", instructions="Be terse.", input="find things", tools=TOOLS
    )

    calls = [item for item in first.output if item.type == "function_call"]
    assert [item.type for item in first.output] == ["message", *["function_call"] * 2]
    assert [json.loads(c.arguments) for c in calls] == [  # type: ignore[union-attr]
        dict(call.arguments) for call in PARALLEL.tool_calls
    ]
    call_ids = [c.call_id for c in calls]  # type: ignore[union-attr]
    assert len(set(call_ids)) == 2

    follow_up: list[Any] = [
        {"role": "user", "content": "find things"},
        *[item.model_dump(exclude_none=True) for item in first.output],
        *[
            {"type": "function_call_output", "call_id": call_id, "output": f"hit{i}"}
            for i, call_id in enumerate(call_ids)
        ],
    ]
    second = await oai.responses.create(
        model="script:search", instructions="Be terse.", input=follow_up, tools=TOOLS
    )

    expected = " | ".join(f"{call_id}=hit{i}" for i, call_id in enumerate(call_ids))
    assert second.output_text == f"[Be terse.] {expected}"
    assert [r.turn_index for r in models.requests] == [0, 1]


async def test_stream_helper_assembles_the_same_response(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    models.scripts.add("search", search_script)

    async with oai.responses.stream(model="script:search", input="go", tools=TOOLS) as stream:
        kinds = [event.type async for event in stream]
        streamed = await stream.get_final_response()
    plain = await oai.responses.create(model="script:search", input="go", tools=TOOLS)

    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert kinds.count("response.function_call_arguments.delta") > 2
    assert kinds.count("response.output_text.delta") == 2
    assert streamed.output_text == plain.output_text == "Two searches."

    def summary(items: Sequence[Any]) -> list[tuple[str, str, str]]:
        return [(i.type, i.id, getattr(i, "arguments", "")) for i in items]

    assert summary(streamed.output) == summary(plain.output)
    assert streamed.id == plain.id


async def test_cut_stream_raises_in_the_consumer(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    models.scripts.add("cut", [Turn(text="a b c d", faults=[CutStream(after_events=5)])])

    deltas: list[str] = []
    with pytest.raises(openai.APIConnectionError):
        async with oai.responses.stream(model="script:cut", input="go") as stream:
            async for event in stream:
                if event.type == "response.output_text.delta":
                    deltas.append(event.delta)

    # created, in_progress, item added, part added, then the first delta.
    assert deltas == ["a "]


async def test_previous_response_id_is_refused_clearly(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    models.scripts.add("hi", [Turn(text="x")])

    with pytest.raises(openai.BadRequestError, match="send the whole input"):
        await oai.responses.create(model="script:hi", input="x", previous_response_id="resp_1")


async def test_empty_input_is_a_400(models: LocalModelServer, oai: openai.AsyncOpenAI) -> None:
    models.scripts.add("hi", [Turn(text="x")])

    with pytest.raises(openai.BadRequestError, match="'input' must be a non-empty"):
        await oai.responses.create(model="script:hi", input=[])
