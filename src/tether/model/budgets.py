"""Budgets as users write them (`nodes=3,cost=+0.5`) and the refusal to resume a run whose
budget is still spent: one place for the CLI, the server and in-process callers.

`+N` means N more than the run used so far (for a new run: N).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tether.foundation.core import Budget
from tether.foundation.errors import BadBudget, BudgetSpent
from tether.foundation.status import Status
from tether.model.graph import Graph
from tether.model.records import BudgetLimits, budget_of

# The keys a spec may name, each with the Budget field it sets.
KEYS = {
    "nodes": "max_nodes",
    "tokens": "max_tokens",
    "cost": "max_cost",
    "wall": "max_wall_s",
    "turns": "max_turns",
}
# The word of `Graph.exhausted`'s reason ("budget: node limit 3 reached") -> the key.
_KEY_OF_WORD = {"node": "nodes", "token": "tokens", "cost": "cost", "turn": "turns"}


def used(graph: Graph) -> dict[str, float]:
    """What the run has used so far, by budget key (wall in seconds)."""
    return {
        "nodes": graph.completed_count,
        "tokens": graph.tokens,
        "cost": graph.cost,
        "wall": graph.wall_ms() / 1000,
        "turns": graph.model_calls,
    }


# A change of limits by Budget field (`max_nodes`): (amount, relative), where relative
# means `amount` more than the run used so far.
Change = Mapping[str, tuple[float, bool]]
LIMIT_RULE = 'a limit is a finite number >= 0 (0: none), or "+N": N more than used so far'


def limit_value(raw: float | str) -> tuple[float, bool]:
    """A limit as given, `3` or `"+2"`: (amount, relative). ValueError saying the rule."""
    if isinstance(raw, bool):
        raise ValueError(LIMIT_RULE)
    relative = isinstance(raw, str) and raw.strip().startswith("+")
    try:
        amount = float(raw)
    except ValueError:
        raise ValueError(f"not a number; {LIMIT_RULE}") from None
    if not math.isfinite(amount) or amount < 0:
        raise ValueError(LIMIT_RULE)
    return amount, relative


def parse_change(spec: str) -> dict[str, tuple[float, bool]]:
    """`nodes=8,tokens=+5000` by Budget field; BadBudget names the item at fault."""
    change = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, raw = part.partition("=")
        name, raw = name.strip(), raw.strip()
        if name not in KEYS or not raw:
            raise BadBudget(
                f"bad --budget item {part!r}: the keys are {', '.join(KEYS)} "
                "(e.g. nodes=20,cost=0.5,wall=300; wall in seconds, +N: N more than used)"
            )
        try:
            change[KEYS[name]] = limit_value(raw)
        except ValueError as exc:
            raise BadBudget(f"bad --budget value in {part!r}: {exc}") from None
    return change


def apply_change(change: Change, graph: Graph | None = None) -> Budget:
    """`graph`'s limits (none, without a graph) with those `change` names replaced; a
    relative one is that much more than `graph` used so far."""
    base = budget_of(graph.limits) if graph is not None else Budget()
    so_far = used(graph) if graph is not None else dict.fromkeys(KEYS, 0.0)
    values: dict[str, float] = {field: getattr(base, field) for field in KEYS.values()}
    for key, field in KEYS.items():
        if field in change:
            amount, relative = change[field]
            values[field] = so_far[key] + amount if relative else amount
    return Budget(
        max_nodes=math.ceil(values["max_nodes"]),
        max_tokens=math.ceil(values["max_tokens"]),
        max_cost=values["max_cost"],
        max_wall_s=values["max_wall_s"],
        max_turns=math.ceil(values["max_turns"]),
    )


def parse_budget(spec: str, graph: Graph | None = None) -> Budget:
    """`nodes=8,tokens=+5000,cost=0.5,wall=600,turns=20` on top of `graph`'s limits (if
    given); `+N` is N more than `graph` used so far. BadBudget names the item at fault."""
    return apply_change(parse_change(spec), graph)


def refuse_spent(graph: Graph, limits: BudgetLimits) -> None:
    """BudgetSpent if `graph`, paused, would be paused again at once by `limits` (the
    limits it resumes with): resuming must raise what ran out, not pause silently."""
    if graph.status is not Status.PAUSED:
        return
    why = graph.exhausted(graph.last_at_us, limits)
    if why is not None:
        word = why.removeprefix("budget: ").split()[0]
        key = _KEY_OF_WORD.get(word, "wall")
        raise BudgetSpent(graph.run_id, why, key, KEYS[key])
