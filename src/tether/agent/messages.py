"""The provider-neutral conversation: what a model turn sends and what it gets back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# A message is a plain dict, as recorded in the log:
#   {"role": "user", "content": str}
#   {"role": "assistant", "content": str, "tool_calls": [{"id", "name", "arguments"}]}
#   {"role": "tool", "tool_call_id": str, "name": str, "content": str, "is_error": bool}
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
        return {
            "role": "assistant",
            "content": self.text,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls
            ],
        }


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    schema: dict[str, Any]
