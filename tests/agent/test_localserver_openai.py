"""The official openai SDK against the local model server: Chat Completions."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import openai

from tether.testing import LocalModelServer, Message, ToolCall, ToolSpec, Turn, Usage

USER = [{"role": "user", "content": "What is the weather in Paris and Rome?"}]
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    for name in ("weather", "forecast")
]
PARALLEL = Turn(
    text="Checking three things at once.",
    tool_calls=[
        ToolCall("weather", {"city": "Paris"}),
        ToolCall("weather", {"city": "Rome", "units": "metric"}),
        ToolCall("forecast", {"city": "Paris", "days": [1, 2, 3]}),
    ],
)


def summarise_results(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
    """Turn 1: prove the server handed the script each tool result with its call id."""
    results = [f"{m.tool_call_id}={m.text}" for m in messages if m.role == "tool"]
    offered = ",".join(t.name for t in tools)
    return Turn(text=f"tools[{offered}] " + " | ".join(results))


def weather_script(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
    if not any(m.role == "assistant" for m in messages):
        return PARALLEL
    return summarise_results(messages, tools)


async def test_text_reply_with_scripted_usage(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    models.scripts.add("hello", [Turn(text="Hello from the script.", usage=Usage(12, 5))])

    completion = await oai.chat.completions.create(model="script:hello", messages=USER)

    choice = completion.choices[0]
    assert choice.message.content == "Hello from the script."
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    assert completion.model == "script:hello"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (12, 5)
    assert completion.usage.total_tokens == 17


async def test_streamed_text_arrives_in_pieces_with_final_usage(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    text = "Streaming works one word at a time, like a real model."
    models.scripts.add("stream", [Turn(text=text, usage=Usage(7, 11))])

    stream = await oai.chat.completions.create(
        model="script:stream",
        messages=USER,
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces: list[str] = []
    finish_reasons: list[str] = []
    usages = []
    async for chunk in stream:
        if chunk.usage is not None:
            usages.append(chunk.usage)
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            if choice.finish_reason:
                finish_reasons.append(choice.finish_reason)

    assert "".join(pieces) == text
    assert len(pieces) == len(text.split())
    assert finish_reasons == ["stop"]
    assert [(u.prompt_tokens, u.completion_tokens) for u in usages] == [(7, 11)]


async def test_stream_without_include_usage_sends_no_usage(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    models.scripts.add("quiet", [Turn(text="no usage please")])

    stream = await oai.chat.completions.create(model="script:quiet", messages=USER, stream=True)
    chunks = [chunk async for chunk in stream]

    assert all(chunk.usage is None for chunk in chunks)
    assert all(chunk.choices for chunk in chunks)


async def test_parallel_tool_calls_round_trip(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    models.scripts.add("weather", weather_script)

    first = await oai.chat.completions.create(model="script:weather", messages=USER, tools=TOOLS)

    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    assert message.content == "Checking three things at once."
    calls = message.tool_calls or []
    assert [c.function.name for c in calls] == ["weather", "weather", "forecast"]
    arguments = [json.loads(c.function.arguments) for c in calls]
    assert arguments == [dict(call.arguments) for call in PARALLEL.tool_calls]
    ids = [c.id for c in calls]
    assert len(set(ids)) == 3 and all(i.startswith("call_") for i in ids)

    history: list[Any] = [*USER, message.model_dump(exclude_none=True)]
    history += [
        {"role": "tool", "tool_call_id": call_id, "content": f"result{i}"}
        for i, call_id in enumerate(ids)
    ]
    second = await oai.chat.completions.create(
        model="script:weather", messages=history, tools=TOOLS
    )

    expected = " | ".join(f"{call_id}=result{i}" for i, call_id in enumerate(ids))
    assert second.choices[0].message.content == f"tools[weather,forecast] {expected}"
    assert second.choices[0].finish_reason == "stop"
    assert [r.turn_index for r in models.requests] == [0, 1]


async def test_streamed_parallel_tool_calls_match_the_unstreamed_reply(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    models.scripts.add("weather", weather_script)

    async with oai.chat.completions.stream(
        model="script:weather", messages=USER, tools=TOOLS
    ) as stream:
        tool_deltas = 0
        async for event in stream:
            if event.type == "chunk" and event.chunk.choices:
                tool_deltas += len(event.chunk.choices[0].delta.tool_calls or [])
        streamed = await stream.get_final_completion()
    plain = await oai.chat.completions.create(model="script:weather", messages=USER, tools=TOOLS)

    streamed_calls = streamed.choices[0].message.tool_calls or []
    plain_calls = plain.choices[0].message.tool_calls or []
    # The SDK had to assemble each call's arguments from several fragments.
    assert tool_deltas > len(plain_calls)

    def triples(calls: Sequence[Any]) -> list[tuple[str, str, str]]:
        return [(c.id, c.function.name, c.function.arguments) for c in calls]

    assert triples(streamed_calls) == triples(plain_calls)
    assert len(streamed_calls) == 3
    assert streamed.choices[0].message.content == plain.choices[0].message.content
    assert streamed.choices[0].finish_reason == "tool_calls"


async def test_same_request_gets_the_same_reply(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    models.scripts.add("weather", weather_script)

    first = await oai.chat.completions.create(model="script:weather", messages=USER, tools=TOOLS)
    again = await oai.chat.completions.create(model="script:weather", messages=USER, tools=TOOLS)
    other = await oai.chat.completions.create(
        model="script:weather",
        messages=[{"role": "user", "content": "And in Oslo?"}],
        tools=TOOLS,
    )

    assert again.model_dump() == first.model_dump()
    assert other.id != first.id
    first_ids = [c.id for c in first.choices[0].message.tool_calls or []]
    other_ids = [c.id for c in other.choices[0].message.tool_calls or []]
    assert not set(first_ids) & set(other_ids)


async def test_estimated_usage_is_deterministic_and_grows_with_the_prompt(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    models.scripts.add("est", [Turn(text="short answer")])
    long_prompt = [{"role": "user", "content": "word " * 400}]

    small = await oai.chat.completions.create(model="script:est", messages=USER)
    again = await oai.chat.completions.create(model="script:est", messages=USER)
    large = await oai.chat.completions.create(model="script:est", messages=long_prompt)

    assert small.usage is not None and again.usage is not None and large.usage is not None
    assert small.usage == again.usage
    assert small.usage.completion_tokens == large.usage.completion_tokens > 0
    assert large.usage.prompt_tokens > small.usage.prompt_tokens * 10


async def test_models_endpoint_lists_the_scripts(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    models.scripts.add("b", [Turn(text="b")])
    models.scripts.add("a", [Turn(text="a")])

    listed = [model.id async for model in oai.models.list()]

    assert listed == ["script:a", "script:b"]
