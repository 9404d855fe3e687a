"""A provider-neutral view of a model request, so one script serves both APIs."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tether.foundation.errors import TetherError
from tether.testing.turns import ToolCall

Role = Literal["system", "user", "assistant", "tool"]
Api = Literal["openai.chat", "openai.responses", "anthropic.messages"]
# Body fields that change how a reply is delivered, not what it says.
_TRANSPORT_ONLY = frozenset({"stream", "stream_options"})


class BadRequest(TetherError):
    """A request body the real API would reject; answered with 400 and this message."""


@dataclass(frozen=True, slots=True)
class Message:
    """One message of the conversation so far.

    Anthropic's tool_result blocks become `role="tool"` messages, one per result, so a
    script reads tool results the same way whichever SDK sent them.
    """

    role: Role
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool the client offered to the model."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """A validated request, whichever API it came through."""

    api: Api
    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    stream: bool
    include_usage: bool
    body: Mapping[str, Any]

    @property
    def assistant_turns(self) -> int:
        """How many assistant turns the conversation already holds: the script index."""
        return count_assistant_turns(self.messages)

    @property
    def prompt_text(self) -> str:
        """Everything the model would read, for usage estimates."""
        parts = [m.text for m in self.messages]
        parts += [c.name + c.arguments_json() for m in self.messages for c in m.tool_calls]
        return "\n".join(parts)

    @property
    def fingerprint(self) -> str:
        """A hash of the request body: equal requests give equal replies and ids.

        The streaming options are left out on purpose: a turn re-run after a crash may be
        fetched in the other mode and must still get the same ids.
        """
        seen = {k: v for k, v in self.body.items() if k not in _TRANSPORT_ONLY}
        seen["_api"] = self.api
        canonical = json.dumps(seen, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(canonical.encode()).hexdigest()


def count_assistant_turns(messages: Sequence[Message]) -> int:
    return sum(1 for m in messages if m.role == "assistant")


def require(body: Mapping[str, Any], key: str, kind: type, what: str) -> Any:
    """Return body[key] if present and of the right JSON type, else raise BadRequest."""
    if key not in body or body[key] is None:
        raise BadRequest(f"missing required field '{key}' ({what})")
    value = body[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadRequest(f"field '{key}' must be {what}, got {type(value).__name__}")
    return value


def parse_arguments(raw: object, where: str) -> dict[str, Any]:
    """Tool call arguments as a dict, from a JSON string (OpenAI) or an object (Anthropic)."""
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as exc:
            raise BadRequest(f"{where}: arguments are not valid JSON ({exc.msg})") from exc
        if isinstance(value, dict):
            return value
    raise BadRequest(f"{where}: arguments must be a JSON object")
