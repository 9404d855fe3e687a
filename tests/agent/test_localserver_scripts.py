"""Scripts, turns and faults as plain data: no server involved."""

from __future__ import annotations

import pytest

from tether.testing import (
    CutStream,
    Message,
    RateLimited,
    ScriptError,
    ScriptRegistry,
    ServerError,
    ToolCall,
    Turn,
    TurnList,
    Usage,
)
from tether.testing.replies import json_pieces, text_pieces

TURNS = [Turn(text="zero"), Turn(text="one"), Turn(text="two")]


def history(assistant_turns: int) -> list[Message]:
    messages = [Message("system", "be nice"), Message("user", "q")]
    for i in range(assistant_turns):
        calls = (ToolCall("t", {"i": i}, id=f"c{i}"),)
        messages += [Message("assistant", "", tool_calls=calls), Message("tool", "r", "", f"c{i}")]
    return messages


def test_turn_list_is_indexed_by_assistant_turns_not_by_calls() -> None:
    script = TurnList(TURNS)

    answers = [script(history(k), ()).text for k in (0, 1, 2, 1, 0)]

    assert answers == ["zero", "one", "two", "one", "zero"]


def test_an_exhausted_turn_list_says_how_long_it_is() -> None:
    with pytest.raises(ScriptError, match="script has 3 turns but the request already holds 3"):
        TurnList(TURNS)(history(3), ())


def test_turns_need_content_and_sane_timing() -> None:
    with pytest.raises(ValueError, match="needs text, tool calls"):
        Turn()
    with pytest.raises(ValueError, match="latency"):
        Turn(text="x", latency=-1)
    assert Turn(tool_calls=[ToolCall("t")]).tool_calls == (ToolCall("t"),)


def test_registry_resolves_script_models_and_names_the_known_ones() -> None:
    registry = ScriptRegistry({"research": TURNS, "script:other": TurnList(TURNS)})

    assert registry.names() == ["other", "research"]
    assert registry.resolve("script:research")(history(1), ()).text == "one"
    with pytest.raises(
        ScriptError, match=r"unknown model 'research'.*script:other, script:research"
    ):
        registry.resolve("research")
    with pytest.raises(ScriptError, match="unknown model 'script:missing'"):
        registry.resolve("script:missing")


def test_retry_headers_carry_seconds_rounded_up_and_milliseconds() -> None:
    assert RateLimited(retry_after=0.25).headers() == {"retry-after": "1", "retry-after-ms": "250"}
    assert RateLimited(retry_after=2).headers() == {"retry-after": "2", "retry-after-ms": "2000"}
    assert ServerError(503).headers() == {}
    assert ServerError(503, retry_after=1.5).headers()["retry-after"] == "2"


def test_server_error_must_be_5xx() -> None:
    with pytest.raises(ValueError, match="must be 5xx"):
        ServerError(429)
    assert CutStream().after_events == 2


def test_usage_total() -> None:
    assert Usage(3, 4).total_tokens == 7


def test_chunking_loses_nothing() -> None:
    text = "  leading space, two  spaces\nand a newline "
    arguments = ToolCall("t", {"q": "ünïcode", "n": [1, 2, 3]}).arguments_json()

    assert "".join(text_pieces(text)) == text
    assert len(text_pieces("a b c")) == 3
    assert "".join(json_pieces(arguments)) == arguments
    assert all(len(piece) <= 8 for piece in json_pieces(arguments))
    assert json_pieces("") == [""]
