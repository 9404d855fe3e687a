"""The last prompt built for each run, so the next turn's prompt extends it (O(1) a turn).

A turn's prompt is the previous turn's prompt, that turn's reply and its tool results
(`Agent.history`). Records never change once written, so a prompt built for turn `t`
of run `r` stays right for as long as the process lives; only the last one per run is
kept, and only for a bounded number of runs. A run seen for the first time in this
process (a resumed or rehydrated one) walks its ancestors once.
"""

from __future__ import annotations

from collections import OrderedDict

from tether.agent.messages import Message

DEFAULT_RUNS = 256


class Conversations:
    """The prompt last built per run id: (turn node id, its messages), least recent evicted."""

    def __init__(self, runs: int = DEFAULT_RUNS) -> None:
        self._runs = runs
        self._last: OrderedDict[str, tuple[str, tuple[Message, ...]]] = OrderedDict()

    def prompt_of(self, run_id: str, turn_id: str) -> tuple[Message, ...] | None:
        """The prompt built for `turn_id` of `run_id`, if it is the last one kept."""
        last = self._last.get(run_id)
        if last is None or last[0] != turn_id:
            return None
        self._last.move_to_end(run_id)
        return last[1]

    def keep(self, run_id: str, turn_id: str, messages: list[Message]) -> None:
        """Remember the prompt of `turn_id`: the next turn of the run extends it."""
        self._last[run_id] = (turn_id, tuple(messages))
        self._last.move_to_end(run_id)
        while len(self._last) > self._runs:
            self._last.popitem(last=False)

    def forget(self, run_id: str) -> None:
        """Drop what is kept for a run (its last turn answered: no turn follows)."""
        self._last.pop(run_id, None)

    def __len__(self) -> int:
        return len(self._last)
