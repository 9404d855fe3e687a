"""Request validation, script errors and the request log, seen over raw HTTP and the SDKs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tether.testing import LocalModelServer, Message, ToolSpec, Turn

OAI_USER: list[Any] = [{"role": "user", "content": "hello"}]


@pytest.fixture
async def http(models: LocalModelServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=models.base_url) as client:
        yield client


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"messages": OAI_USER}, "missing required field 'model'"),
        ({"model": "script:x"}, "missing required field 'messages'"),
        ({"model": "script:x", "messages": "hello"}, "'messages' must be a list"),
        ({"model": "script:x", "messages": []}, "at least one message"),
        ({"model": "script:x", "messages": [{"role": "robot", "content": "x"}]}, "unknown role"),
        (
            {"model": "script:x", "messages": [{"role": "tool", "content": "x"}]},
            "needs 'tool_call_id'",
        ),
        ({"model": "script:x", "messages": OAI_USER, "n": 2}, "n=2 is not supported"),
    ],
)
async def test_malformed_openai_bodies_get_400_with_the_reason(
    models: LocalModelServer, http: httpx.AsyncClient, body: dict[str, Any], needle: str
) -> None:
    response = await http.post("/v1/chat/completions", json=body)

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert needle in error["message"]
    assert models.requests[-1].outcome == "bad_request"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"max_tokens": 8, "messages": OAI_USER}, "missing required field 'model'"),
        ({"model": "script:x", "max_tokens": 8}, "missing required field 'messages'"),
        ({"model": "script:x", "messages": OAI_USER}, "missing required field 'max_tokens'"),
        (
            {"model": "script:x", "max_tokens": 8, "messages": [{"role": "user"}]},
            "missing 'content'",
        ),
    ],
)
async def test_malformed_anthropic_bodies_get_400_with_the_reason(
    http: httpx.AsyncClient, body: dict[str, Any], needle: str
) -> None:
    response = await http.post("/v1/messages", json=body)

    assert response.status_code == 400
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert needle in response.json()["error"]["message"]


async def test_a_body_that_is_not_json_gets_400(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/chat/completions", content=b"{not json")

    assert response.status_code == 400
    assert "JSON object" in response.json()["error"]["message"]


async def test_any_api_key_or_none_is_accepted(
    models: LocalModelServer, http: httpx.AsyncClient
) -> None:
    models.scripts.add("k", [Turn(text="fine")])
    body = {"model": "script:k", "messages": OAI_USER}

    with_key = await http.post(
        "/v1/chat/completions", json=body, headers={"authorization": "Bearer whatever"}
    )
    without = await http.post("/v1/chat/completions", json=body)

    assert with_key.status_code == without.status_code == 200


async def test_unknown_model_is_404_naming_the_known_scripts(
    models: LocalModelServer, oai: openai.AsyncOpenAI, claude: anthropic.AsyncAnthropic
) -> None:
    models.scripts.add("research", [Turn(text="x")])

    with pytest.raises(openai.NotFoundError, match="script:research"):
        await oai.chat.completions.create(model="gpt-4o", messages=OAI_USER)
    with pytest.raises(anthropic.NotFoundError, match="script:research"):
        await claude.messages.create(model="script:nope", max_tokens=8, messages=OAI_USER)


async def test_an_exhausted_script_is_a_clear_400(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    models.scripts.add("short", [Turn(text="only turn")])
    history: list[Any] = [*OAI_USER, {"role": "assistant", "content": "only turn"}, *OAI_USER]

    with pytest.raises(openai.BadRequestError, match="script has 1 turns"):
        await oai.chat.completions.create(model="script:short", messages=history)


async def test_a_script_that_raises_is_a_500_the_sdk_does_not_retry(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    def broken(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
        raise KeyError("oops")

    models.scripts.add("broken", broken)

    with pytest.raises(openai.InternalServerError, match="raised KeyError"):
        await oai.with_options(max_retries=3).chat.completions.create(
            model="script:broken", messages=OAI_USER
        )
    assert len(models.requests) == 1


async def test_the_log_records_what_was_asked_and_answered(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    models.scripts.add("log", [Turn(text="first"), Turn(text="second")])
    history: list[Any] = [*OAI_USER, {"role": "assistant", "content": "first"}, *OAI_USER]

    await oai.chat.completions.create(model="script:log", messages=OAI_USER)
    stream = await oai.chat.completions.create(model="script:log", messages=history, stream=True)
    _ = [chunk async for chunk in stream]

    first, second = models.requests
    assert (first.api, first.stream, first.turn_index, first.status) == (
        "openai.chat",
        False,
        0,
        200,
    )
    assert (second.stream, second.turn_index) == (True, 1)
    assert first.body["messages"] == OAI_USER
    assert first.reply is not None and first.reply.text == "first"
    assert second.reply is not None and second.reply.text == "second"
    assert models.requests_for("script:log") == [first, second]
    assert models.requests_for("script:other") == []


async def test_requests_sent_at_once_are_all_answered(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    models.scripts.add("slow", [Turn(text="done", latency=0.3)])

    replies = await asyncio.gather(
        *(
            oai.chat.completions.create(
                model="script:slow", messages=[{"role": "user", "content": f"q{i}"}]
            )
            for i in range(5)
        )
    )

    assert [r.choices[0].message.content for r in replies] == ["done"] * 5
    assert [r.outcome for r in models.requests] == ["ok"] * 5
    # That they were served at once, not one after another, is timed in `python -m bench`
    # (family model_server): a unit test asserts no wall-clock threshold.
