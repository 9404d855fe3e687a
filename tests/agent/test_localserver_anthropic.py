"""The official anthropic SDK against the local model server: Messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anthropic

from tether.testing import LocalModelServer, Message, ToolCall, ToolSpec, Turn, Usage

USER: list[Any] = [{"role": "user", "content": "Compare Paris and Rome."}]
TOOLS: list[Any] = [
    {
        "name": "lookup",
        "description": "Look a city up",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
PARALLEL = Turn(
    text="Looking both up.",
    tool_calls=[
        ToolCall("lookup", {"city": "Paris", "fields": ["population", "area"]}),
        ToolCall("lookup", {"city": "Rome", "nested": {"deep": True, "n": 2.5}}),
    ],
    usage=Usage(30, 9),
)


def lookup_script(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
    if not any(m.role == "assistant" for m in messages):
        return PARALLEL
    system = next((m.text for m in messages if m.role == "system"), "")
    results = [f"{m.tool_call_id}={m.text}" for m in messages if m.role == "tool"]
    return Turn(text=f"[{system}] " + " | ".join(results))


async def test_text_reply_with_usage(
    models: LocalModelServer, claude: anthropic.AsyncAnthropic
) -> None:
    models.scripts.add("hello", [Turn(text="Bonjour.", usage=Usage(21, 3))])

    message = await claude.messages.create(model="script:hello", max_tokens=64, messages=USER)

    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "Bonjour."  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (21, 3)
    assert message.id.startswith("msg_")


async def test_streamed_text_with_every_event_type(
    models: LocalModelServer, claude: anthropic.AsyncAnthropic
) -> None:
    text = "Streaming arrives as text deltas, one word each."
    models.scripts.add("stream", [Turn(text=text, usage=Usage(4, 10))])

    stream = await claude.messages.create(
        model="script:stream", max_tokens=64, messages=USER, stream=True
    )
    events = [event async for event in stream]

    kinds = [event.type for event in events]
    deltas = [e.delta.text for e in events if e.type == "content_block_delta"]  # type: ignore[union-attr]
    n = len(text.split())
    assert kinds == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * n,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert "".join(deltas) == text
    message_delta = events[-2]
    assert message_delta.type == "message_delta"
    assert message_delta.delta.stop_reason == "end_turn"
    assert message_delta.usage.output_tokens == 10


async def test_stream_helper_accumulates_the_final_message(
    models: LocalModelServer, claude: anthropic.AsyncAnthropic
) -> None:
    models.scripts.add("stream", [Turn(text="All of it, in the end.", usage=Usage(4, 6))])

    async with claude.messages.stream(
        model="script:stream", max_tokens=64, messages=USER
    ) as stream:
        pieces = [piece async for piece in stream.text_stream]
        final = await stream.get_final_message()

    assert "".join(pieces) == "All of it, in the end."
    assert final.content[0].text == "All of it, in the end."  # type: ignore[union-attr]
    assert (final.usage.input_tokens, final.usage.output_tokens) == (4, 6)


async def test_parallel_tool_use_round_trip(
    models: LocalModelServer, claude: anthropic.AsyncAnthropic
) -> None:
    models.scripts.add("lookup", lookup_script)

    first = await claude.messages.create(
        model="script:lookup", max_tokens=256, system="Be brief.", messages=USER, tools=TOOLS
    )

    assert first.stop_reason == "tool_use"
    assert [block.type for block in first.content] == ["text", "tool_use", "tool_use"]
    uses = [block for block in first.content if block.type == "tool_use"]
    assert [u.input for u in uses] == [dict(call.arguments) for call in PARALLEL.tool_calls]
    assert all(u.name == "lookup" and u.id.startswith("toolu_") for u in uses)
    assert uses[0].id != uses[1].id

    history: list[Any] = [
        *USER,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": u.id, "content": f"data{i}"}
                for i, u in enumerate(uses)
            ],
        },
    ]
    second = await claude.messages.create(
        model="script:lookup", max_tokens=256, system="Be brief.", messages=history, tools=TOOLS
    )

    expected = " | ".join(f"{u.id}=data{i}" for i, u in enumerate(uses))
    assert second.content[0].text == f"[Be brief.] {expected}"  # type: ignore[union-attr]
    assert second.stop_reason == "end_turn"
    assert [r.turn_index for r in models.requests] == [0, 1]


async def test_streamed_tool_use_is_assembled_from_json_fragments(
    models: LocalModelServer, claude: anthropic.AsyncAnthropic
) -> None:
    models.scripts.add("lookup", lookup_script)

    async with claude.messages.stream(
        model="script:lookup", max_tokens=256, messages=USER, tools=TOOLS
    ) as stream:
        fragments = 0
        async for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                fragments += 1
        streamed = await stream.get_final_message()
    plain = await claude.messages.create(
        model="script:lookup", max_tokens=256, messages=USER, tools=TOOLS
    )

    assert fragments > 2
    assert streamed.stop_reason == "tool_use"
    assert [b.model_dump() for b in streamed.content[1:]] == [
        b.model_dump() for b in plain.content[1:]
    ]
    assert streamed.content[0].text == plain.content[0].text  # type: ignore[union-attr]
    assert (streamed.usage.input_tokens, streamed.usage.output_tokens) == (30, 9)


async def test_same_request_gets_the_same_reply(
    models: LocalModelServer, claude: anthropic.AsyncAnthropic
) -> None:
    models.scripts.add("lookup", lookup_script)

    first = await claude.messages.create(
        model="script:lookup", max_tokens=256, messages=USER, tools=TOOLS
    )
    again = await claude.messages.create(
        model="script:lookup", max_tokens=256, messages=USER, tools=TOOLS
    )

    assert again.model_dump() == first.model_dump()
    assert [r.attempt for r in models.requests] == [0, 1]
