"""Injected faults as the SDKs see them: 429s, 5xx, cut streams and simulated latency."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
import openai
import pytest

from tether.testing import (
    CutStream,
    LocalModelServer,
    RateLimited,
    ServerError,
    ToolCall,
    Turn,
)

OAI_USER: list[Any] = [{"role": "user", "content": "hello"}]
CLAUDE_USER: list[Any] = [{"role": "user", "content": "hello"}]


async def test_429_without_retries_raises_with_retry_after(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    models.scripts.add("busy", [Turn(text="later", faults=[RateLimited(retry_after=0.02)])])

    with pytest.raises(openai.RateLimitError) as caught:
        await oai.chat.completions.create(model="script:busy", messages=OAI_USER)

    assert caught.value.status_code == 429
    assert caught.value.response.headers["retry-after"] == "1"
    assert caught.value.response.headers["retry-after-ms"] == "20"
    assert [(r.status, r.outcome) for r in models.requests] == [(429, "rate_limited")]


async def test_openai_sdk_waits_out_429s_then_succeeds(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    busy = [RateLimited(retry_after=0.05), RateLimited(retry_after=0.05)]
    models.scripts.add("busy", [Turn(text="finally", faults=busy)])

    completion = await oai.with_options(max_retries=2).chat.completions.create(
        model="script:busy", messages=OAI_USER
    )

    assert completion.choices[0].message.content == "finally"
    assert [r.outcome for r in models.requests] == ["rate_limited", "rate_limited", "ok"]
    assert [r.attempt for r in models.requests] == [0, 1, 2]
    # That the SDK waited the 2 x 50 ms of retry-after-ms, not its own ~0.5 s back-off, is
    # timed in `python -m bench` (family model_server).


async def test_anthropic_sdk_sees_429_then_retries_to_success(
    models: LocalModelServer, claude: anthropic.AsyncAnthropic
) -> None:
    models.scripts.add("busy", [Turn(text="ok", faults=[RateLimited(retry_after=0.03)])])

    with pytest.raises(anthropic.RateLimitError) as caught:
        await claude.messages.create(model="script:busy", max_tokens=8, messages=CLAUDE_USER)
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "rate_limit_error", "message": RateLimited().message},
    }
    models.reset()
    message = await claude.with_options(max_retries=1).messages.create(
        model="script:busy", max_tokens=8, messages=CLAUDE_USER
    )

    assert message.content[0].text == "ok"  # type: ignore[union-attr]
    assert [r.outcome for r in models.requests] == ["rate_limited", "ok"]


async def test_5xx_surfaces_as_server_errors(
    models: LocalModelServer, oai: openai.AsyncOpenAI, claude: anthropic.AsyncAnthropic
) -> None:
    models.scripts.add("down", [Turn(text="up again", faults=[ServerError(503)])])
    models.scripts.add("overloaded", [Turn(text="up again", faults=[ServerError(529)])])

    with pytest.raises(openai.InternalServerError) as from_openai:
        await oai.chat.completions.create(model="script:down", messages=OAI_USER)
    with pytest.raises(anthropic.OverloadedError) as from_anthropic:
        await claude.messages.create(model="script:overloaded", max_tokens=8, messages=CLAUDE_USER)

    assert from_openai.value.status_code == 503
    assert from_anthropic.value.status_code == 529
    assert [r.outcome for r in models.requests] == ["server_error_503", "server_error_529"]


async def test_5xx_then_success_with_sdk_retries(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    faults = [ServerError(500, retry_after=0.01), ServerError(503, retry_after=0.01)]
    models.scripts.add("flaky", [Turn(text="recovered", faults=faults)])

    completion = await oai.with_options(max_retries=2).chat.completions.create(
        model="script:flaky", messages=OAI_USER
    )

    assert completion.choices[0].message.content == "recovered"
    assert [r.status for r in models.requests] == [500, 503, 200]


async def test_openai_stream_cut_mid_turn_raises_in_the_consumer(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    text = "one two three four five six seven"
    models.scripts.add("cut", [Turn(text=text, faults=[CutStream(after_events=3)])])

    received: list[str] = []
    stream = await oai.chat.completions.create(model="script:cut", messages=OAI_USER, stream=True)
    with pytest.raises(openai.APIConnectionError):
        async for chunk in stream:
            received.append(chunk.choices[0].delta.content or "")

    # Three events went out (role, "one ", "two "), then the connection dropped.
    assert "".join(received) == "one two "
    assert [r.outcome for r in models.requests] == ["cut_stream"]


async def test_rerun_after_a_cut_gets_the_same_reply(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    turn = Turn(
        text="partial then whole",
        tool_calls=[ToolCall("search", {"q": "x"})],
        faults=[CutStream(after_events=2)],
    )
    models.scripts.add("cut", [turn])

    cut_ids: list[str] = []
    stream = await oai.chat.completions.create(model="script:cut", messages=OAI_USER, stream=True)
    with pytest.raises(openai.APIConnectionError):
        async for chunk in stream:
            cut_ids.append(chunk.id)
    rerun = await oai.chat.completions.create(model="script:cut", messages=OAI_USER)

    assert cut_ids and set(cut_ids) == {rerun.id}
    calls = rerun.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls] == ["search"]  # type: ignore[union-attr]
    assert [r.outcome for r in models.requests] == ["cut_stream", "ok"]


async def test_anthropic_stream_cut_mid_turn_raises_in_the_consumer(
    models: LocalModelServer, claude: anthropic.AsyncAnthropic
) -> None:
    models.scripts.add("cut", [Turn(text="a b c d e f", faults=[CutStream(after_events=5)])])

    pieces: list[str] = []
    # The anthropic SDK lets the transport's error through while iterating a stream
    # (the openai SDK wraps it in APIConnectionError); either way the consumer sees it.
    with pytest.raises((anthropic.APIConnectionError, httpx2.RemoteProtocolError)):
        async with claude.messages.stream(
            model="script:cut", max_tokens=8, messages=CLAUDE_USER
        ) as stream:
            async for piece in stream.text_stream:
                pieces.append(piece)

    # message_start, ping, content_block_start, then two text deltas.
    assert pieces == ["a ", "b "]


async def test_unstreamed_body_cut_in_half_is_a_connection_error(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    models.scripts.add("cut", [Turn(text="whole answer", faults=[CutStream()])])

    with pytest.raises(openai.APIConnectionError):
        await oai.chat.completions.create(model="script:cut", messages=OAI_USER)
    retried = await oai.chat.completions.create(model="script:cut", messages=OAI_USER)

    assert retried.choices[0].message.content == "whole answer"


async def test_injected_faults_hit_the_next_requests_of_any_script(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    models.scripts.add("a", [Turn(text="a")])
    models.scripts.add("b", [Turn(text="b")])
    models.inject(ServerError(502), RateLimited())

    with pytest.raises(openai.InternalServerError):
        await oai.chat.completions.create(model="script:a", messages=OAI_USER)
    with pytest.raises(openai.RateLimitError):
        await oai.chat.completions.create(model="script:b", messages=OAI_USER)
    completion = await oai.chat.completions.create(model="script:a", messages=OAI_USER)

    assert completion.choices[0].message.content == "a"
    assert [(r.model, r.status) for r in models.requests] == [
        ("script:a", 502),
        ("script:b", 429),
        ("script:a", 200),
    ]


async def test_latency_and_chunk_delay_are_simulated(
    models: LocalModelServer, oai: openai.AsyncOpenAI
) -> None:
    models.scripts.add("slow", [Turn(text="slow", latency=0.15)])
    models.scripts.add("drip", [Turn(text="w1 w2 w3 w4", chunk_delay=0.04)])

    slow = await oai.chat.completions.create(model="script:slow", messages=OAI_USER)
    assert slow.choices[0].message.content == "slow"
    stream = await oai.chat.completions.create(model="script:drip", messages=OAI_USER, stream=True)
    chunks = [chunk async for chunk in stream]
    # role, four words, finish, [DONE] (not yielded): six chunks. The latency and the 40 ms
    # gaps themselves are timed in `python -m bench` (family model_server).
    assert len(chunks) == 6
    words = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert words == "w1 w2 w3 w4"
