"""Which tether node a framework's agent loop is running inside (a context variable)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from tether.engine.context import Context


@dataclass(slots=True)
class NodeScope:
    """The node a framework run is inside, and how many runs it started so far."""

    ctx: Context
    runs: Iterator[int] = field(default_factory=itertools.count)


_SCOPE: ContextVar[NodeScope | None] = ContextVar("tether_integration_scope", default=None)


@contextmanager
def node_scope(ctx: Context) -> Iterator[NodeScope]:
    """Inside this block, a framework's model requests and tool calls are steps of `ctx`."""
    scope = NodeScope(ctx)
    token = _SCOPE.set(scope)
    try:
        yield scope
    finally:
        _SCOPE.reset(token)


def current_scope() -> NodeScope | None:
    """The node scope the caller runs in, or None outside any (the framework runs as usual)."""
    return _SCOPE.get()
