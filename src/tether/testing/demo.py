"""Built-in scripts for `python -m tether.testing` and `tether demo`."""

from __future__ import annotations

from collections.abc import Sequence

from tether.testing.conversation import Message, ToolSpec, count_assistant_turns
from tether.testing.scripts import Script
from tether.testing.turns import ToolCall, Turn


def _last(messages: Sequence[Message], role: str) -> str:
    return next((m.text for m in reversed(messages) if m.role == role), "")


def demo(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
    """A two-step researcher: search in parallel if a `search` tool is offered, then answer.

    Model time is simulated (0.3 s a turn, 20 ms between streamed chunks) so a live
    demo looks like a model at work.
    """
    latency, chunk_delay = 0.3, 0.02
    question = _last(messages, "user") or "nothing in particular"
    offered = {tool.name for tool in tools}
    if count_assistant_turns(messages) == 0 and "search" in offered:
        return Turn(
            text="I will search from two angles at once.",
            tool_calls=[
                ToolCall("search", {"query": question}),
                ToolCall("search", {"query": f"{question} (counterpoints)"}),
            ],
            latency=latency,
            chunk_delay=chunk_delay,
        )
    results = [m.text for m in messages if m.role == "tool"]
    if results:
        found = sum(len(r) for r in results)
        text = (
            f"I read {len(results)} search results ({found} characters). "
            f"In short: {question.rstrip('?')} is answered by what they agree on."
        )
    else:
        text = f"You asked: {question}. This is the scripted demo model; it answers at once."
    return Turn(text=text, latency=latency, chunk_delay=chunk_delay)


def echo(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
    """Repeat the last user message; handy for checking a client by hand."""
    return Turn(text=_last(messages, "user") or "(empty)")


DEMO_SCRIPTS: dict[str, Script] = {"demo": demo, "echo": echo}
