"""Scripts: deterministic functions from the conversation so far to the next turn.

A script must be a pure function of its arguments. The runtime re-runs a model turn
that crashed before it was recorded, and the re-run must get the same answer; the
server adds nothing time- or order-dependent to a reply (ids are derived from the
request, `created` is fixed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from tether.foundation.errors import TetherError
from tether.testing.conversation import Message, ToolSpec, count_assistant_turns
from tether.testing.turns import Turn

MODEL_PREFIX = "script:"


class ScriptError(TetherError):
    """A script cannot answer this request (exhausted, or unknown model)."""


class Script(Protocol):
    """Anything that maps (messages so far, offered tools) to the next assistant turn.

    A plain function `def script(messages, tools) -> Turn` is a Script.
    """

    def __call__(self, messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn: ...


class TurnList:
    """The declarative form: turn k answers a request holding k assistant turns.

    Counting assistant turns (rather than requests) is what makes the list
    deterministic: a retried or re-run request holds the same history, so it gets the
    same turn however many times it is sent.
    """

    def __init__(self, turns: Iterable[Turn]) -> None:
        self.turns: tuple[Turn, ...] = tuple(turns)
        if not self.turns:
            raise ValueError("a TurnList needs at least one turn")

    def __call__(self, messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
        index = count_assistant_turns(messages)
        if index >= len(self.turns):
            raise ScriptError(
                f"script has {len(self.turns)} turns but the request already holds "
                f"{index} assistant turns; add a turn or end the conversation sooner"
            )
        return self.turns[index]

    def __len__(self) -> int:
        return len(self.turns)


def script_of(turns: Sequence[Turn] | Script) -> Script:
    """Accept either form: a sequence of turns or a callable script."""
    if isinstance(turns, Sequence):
        return TurnList(turns)
    return turns


class ScriptRegistry:
    """Scripts by name; a request picks one with model `"script:<name>"`."""

    def __init__(self, scripts: Mapping[str, Sequence[Turn] | Script] | None = None) -> None:
        self._scripts: dict[str, Script] = {}
        for name, script in (scripts or {}).items():
            self.add(name, script)

    def add(self, name: str, script: Sequence[Turn] | Script) -> None:
        """Register (or replace) a script; tests sharing a server use distinct names."""
        if name.startswith(MODEL_PREFIX):
            name = name.removeprefix(MODEL_PREFIX)
        if not name:
            raise ValueError("a script needs a non-empty name")
        self._scripts[name] = script_of(script)

    def names(self) -> list[str]:
        return sorted(self._scripts)

    def resolve(self, model: str) -> Script:
        """The script a model name selects, or ScriptError naming the known ones."""
        name = model.removeprefix(MODEL_PREFIX)
        if not model.startswith(MODEL_PREFIX) or name not in self._scripts:
            known = ", ".join(MODEL_PREFIX + n for n in self.names()) or "none registered"
            raise ScriptError(f"unknown model '{model}'; this server plays: {known}")
        return self._scripts[name]
