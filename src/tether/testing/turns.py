"""What a script returns: one assistant turn (text, tool calls, usage, faults, timing)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.testing.faults import Fault


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call in an assistant turn.

    `id` is normally left out: the server derives it from the request, so the same
    request always gets the same ids (a re-run turn must match the recorded one).
    """

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None

    def arguments_json(self) -> str:
        """The arguments as the JSON text a provider sends (insertion order kept)."""
        return json.dumps(dict(self.arguments), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage reported for a turn."""

    input_tokens: int
    output_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class Turn:
    """The next assistant turn of a scripted conversation.

    `usage=None` means "estimate it": about four characters a token, computed only from
    the request and the reply, so it is as deterministic as the reply itself.
    `latency` is simulated model time before the first byte; `chunk_delay` is the pause
    between streamed events. `faults` are served, in order, to the first requests for
    this turn (see `faults.py`).
    """

    text: str = ""
    tool_calls: Sequence[ToolCall] = ()
    usage: Usage | None = None
    faults: Sequence[Fault] = ()
    latency: float = 0.0
    chunk_delay: float = 0.0

    def __post_init__(self) -> None:
        if not self.text and not self.tool_calls:
            raise ValueError("a Turn needs text, tool calls, or both")
        if self.latency < 0 or self.chunk_delay < 0:
            raise ValueError("latency and chunk_delay must be >= 0")
        # Accept lists from callers but keep the turn hashable and immutable.
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        object.__setattr__(self, "faults", tuple(self.faults))


def estimate_tokens(text: str) -> int:
    """A deterministic stand-in for a tokenizer: about four characters a token."""
    return max(1, (len(text) + 3) // 4)


def usage_for(turn: Turn, prompt_text: str) -> Usage:
    """The usage to report: the script's own, or an estimate from prompt and reply."""
    if turn.usage is not None:
        return turn.usage
    reply_text = turn.text + "".join(c.name + c.arguments_json() for c in turn.tool_calls)
    return Usage(
        input_tokens=estimate_tokens(prompt_text), output_tokens=estimate_tokens(reply_text)
    )
