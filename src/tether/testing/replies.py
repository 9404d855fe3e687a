"""A turn made concrete for one request: ids, usage, and how it is cut into chunks."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from tether.testing.conversation import ModelRequest
from tether.testing.turns import ToolCall, Turn, Usage, usage_for

# Real APIs stamp replies with the current time; a fixed value keeps a re-run reply
# byte-identical to the first one.
CREATED = 1_700_000_000


@dataclass(frozen=True, slots=True)
class Reply:
    """Everything a dialect needs to render a turn, with every id already fixed."""

    id: str
    model: str
    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage


def derived_id(prefix: str, fingerprint: str, salt: str, length: int = 24) -> str:
    """An id that depends only on the request (and a salt), never on time or order."""
    digest = hashlib.sha256(f"{fingerprint}:{salt}".encode()).hexdigest()
    return prefix + digest[:length]


def build_reply(request: ModelRequest, turn: Turn, *, id_prefix: str, call_prefix: str) -> Reply:
    fingerprint = request.fingerprint
    calls = tuple(
        ToolCall(
            name=call.name,
            arguments=call.arguments,
            id=call.id or derived_id(call_prefix, fingerprint, f"call{i}"),
        )
        for i, call in enumerate(turn.tool_calls)
    )
    return Reply(
        id=derived_id(id_prefix, fingerprint, "reply"),
        model=request.model,
        text=turn.text,
        tool_calls=calls,
        usage=usage_for(turn, request.prompt_text),
    )


_WORD = re.compile(r"\s*\S+\s*|\s+")


def text_pieces(text: str) -> list[str]:
    """Split text the way models stream it: a word (with its spacing) at a time."""
    return _WORD.findall(text)


def json_pieces(text: str, size: int = 8) -> list[str]:
    """Split JSON text into fixed-size fragments, so clients must join them to parse."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def sse(data: Mapping[str, Any] | str, event: str | None = None) -> bytes:
    """One server-sent event frame."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


class Dialect(Protocol):
    """How one provider API parses requests and renders replies and errors."""

    api: str

    def parse(self, body: Mapping[str, Any]) -> ModelRequest: ...

    def reply(self, request: ModelRequest, turn: Turn) -> Reply: ...

    def render(self, reply: Reply) -> dict[str, Any]: ...

    def events(self, reply: Reply, *, include_usage: bool) -> list[bytes]: ...

    def error_body(self, status: int, message: str) -> dict[str, Any]: ...
