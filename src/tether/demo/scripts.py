"""The demo's scripted model: deterministic turns served by the local model server."""

from __future__ import annotations

from collections.abc import Sequence

from tether.demo.pace import speed as _speed
from tether.testing import Message, ToolCall, ToolSpec, Turn

TOPICS = ["durable execution", "gateway timeouts", "rolling deploys", "OOM kills"]


def _pace(turn: Turn) -> Turn:
    s = _speed()
    return Turn(
        text=turn.text,
        tool_calls=turn.tool_calls,
        latency=0.4 * s,
        chunk_delay=0.01 * s,
    )


def research(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
    """Search four angles at once; then consult the analyst, check a figure and write the
    report with its chart; then answer."""
    turns = sum(m.role == "assistant" for m in messages)
    question = next(m.text for m in messages if m.role == "user")
    results = [m.text for m in messages if m.role == "tool"]
    if turns == 0:
        calls = [ToolCall("search", {"query": t}) for t in TOPICS]
        return _pace(
            Turn(text=f"Let me research {question!r} from 4 angles at once.", tool_calls=calls)
        )
    if turns == 1:
        notes = "; ".join(sorted(results))
        return _pace(
            Turn(
                text="I have the sources; asking the analyst, checking a figure, charting them.",
                tool_calls=[
                    ToolCall("analyst", {"task": f"Which finding matters most? {notes}"}),
                    ToolCall("calc", {"expression": "0.3 * 40"}),
                    ToolCall("report", {"title": question, "findings": sorted(results)}),
                ],
            )
        )
    analysis, figure = results[-3], results[-2]
    return _pace(
        Turn(
            text=f"Answer to {question!r}: {analysis} "
            f"Checkpointing 40 turns costs about {figure} ms in total. "
            "The report and its chart are attached to the report step."
        )
    )


def analyst(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
    """Score each note concurrently, then name the strongest."""
    turns = sum(m.role == "assistant" for m in messages)
    task = next(m.text for m in messages if m.role == "user")
    notes = [n.strip() for n in task.split("?", 1)[-1].split(";") if n.strip()]
    if turns == 0:
        return _pace(Turn(tool_calls=[ToolCall("score", {"note": n}) for n in notes]))
    scores = [int(m.text) for m in messages if m.role == "tool"]
    best = max(zip(scores, notes, strict=True))
    return _pace(Turn(text=f"The strongest finding is '{best[1]}' (score {best[0]})."))


SCRIPTS = {"research": research, "analyst": analyst}
