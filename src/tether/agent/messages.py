"""The provider-neutral conversation: what a model turn sends and what it gets back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# A message is a plain dict:
#   {"role": "user", "content": str}
#   {"role": "assistant", "content": str, "tool_calls": [{"id", "name", "arguments"}]}
#   {"role": "tool", "tool_call_id": str, "name": str, "content": str, "is_error": bool}
# A node records its message less what a reader derives (`assistant_of`, `tool_message_of`
# put it back; messages recorded whole by older versions pass through unchanged):
#   a turn that calls tools: {"content": str, "tool_calls": [...]} (the role is the kind's)
#   a tool call: its content, a str; {"content": str, "is_error": true} for an error
#   (the id and name are its call's)
# The run's result, a turn without tool calls, is recorded whole: users read it as is.
Message = dict[str, Any]
OnToken = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    id: str
    name: str
    arguments: Any  # whatever JSON the model produced; validated by the tool


@dataclass(frozen=True, slots=True)
class ModelReply:
    text: str
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0

    def message(self) -> Message:
        """The reply as a turn records it: whole when it is the answer (no tool calls),
        without its role otherwise."""
        if not self.tool_calls:
            return {"role": "assistant", "content": self.text, "tool_calls": []}
        calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls]
        return {"content": self.text, "tool_calls": calls}


def tool_result(content: str, *, is_error: bool = False) -> Message | str:
    """A tool call's result as its node records it (`tool_message_of` reads it back)."""
    return {"content": content, "is_error": True} if is_error else content


def assistant_of(recorded: Message) -> Message:
    """The assistant message a turn recorded, whole."""
    if "role" in recorded:  # the answer, or recorded by a version before slim messages
        return recorded
    return {"role": "assistant", **recorded}


def tool_message_of(recorded: Message | str, call: Message) -> Message:
    """The tool message a tool call's node recorded, whole; `call` is the turn's call."""
    if isinstance(recorded, str):
        content, is_error = recorded, False
    elif "role" in recorded:  # recorded whole by a version before slim messages
        return recorded
    else:
        content, is_error = recorded["content"], recorded.get("is_error", False)
    return {
        "role": "tool",
        "tool_call_id": call["id"],
        "name": call["name"],
        "content": content,
        "is_error": is_error,
    }


def turn_messages(recorded_turn: Message, recorded_results: list[Any]) -> list[Message]:
    """A turn's reply and its tool calls' results, whole: the results are recorded by the
    turn's successors in call order (its parents' order), one per call."""
    turn = assistant_of(recorded_turn)
    calls = turn["tool_calls"]
    return [turn] + [tool_message_of(r, c) for r, c in zip(recorded_results, calls, strict=True)]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    schema: dict[str, Any]
