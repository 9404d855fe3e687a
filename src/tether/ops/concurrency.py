"""Concurrency limits as commands and the API set, remove and show them (one place for all).

The rule the claims enforce is `tether.store.limits`; this module checks a limit's agent
before storing it and reports each limit with the slots its runs hold now.
"""

from __future__ import annotations

from typing import Any

from tether.engine.registry import resolve_agent
from tether.foundation.errors import UnknownLimit
from tether.store.base import Store
from tether.store.limits import ConcurrencyLimit


async def set_limit(store: Store, limit: ConcurrencyLimit) -> None:
    """Store `limit` (replacing the one of its scope); UnknownAgent, with nothing stored,
    if its agent does not resolve here (an agent no run could be of is a typo)."""
    resolve_agent(limit.agent)
    await store.limits.set(limit)


async def remove_limit(
    store: Store, agent: str, key: str | None = None, *, each_key: bool = False
) -> str:
    """Lift the limit of that scope and return the scope's name; UnknownLimit if there is
    none.
    The runs that waited for it are claimable at once."""
    scope = ConcurrencyLimit(agent, 1, key, each_key).scope
    if not await store.limits.remove(agent, key, each_key=each_key):
        raise UnknownLimit(f"no concurrency limit of {scope}; `tether limits list` shows them")
    return scope


def limit_view(limit: ConcurrencyLimit, held: dict[str, int]) -> dict[str, Any]:
    """A limit as the CLI's JSON and the API show it, with `running`: the runs holding its
    slots now (for --each-key, those of its busiest key)."""
    if limit.key is not None:
        running = held.get(limit.key, 0)
    elif limit.each_key:
        running = max((n for k, n in held.items() if k), default=0)
    else:
        running = sum(held.values())
    return {
        "agent": limit.agent,
        "key": limit.key,
        "each_key": limit.each_key,
        "max_running": limit.max_running,
        "running": running,
    }


async def limit_views(store: Store) -> list[dict[str, Any]]:
    """Every stored concurrency limit (`limit_view`), by agent, then scope."""
    views, held = [], {}
    for limit in await store.limits.all():
        if limit.agent not in held:
            held[limit.agent] = await store.limits.held(limit.agent)
        views.append(limit_view(limit, held[limit.agent]))
    return views
