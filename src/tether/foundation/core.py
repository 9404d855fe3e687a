"""The core types a handler sees and returns: Node, Spawn, Wait, Sleep, NodeResult, Usage..."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Node:
    """A node as its handler sees it."""

    node_id: str
    kind: str
    parent_ids: tuple[str, ...]
    input: Any
    attempt: int = 1


# The executor's constructor of a Node (one per attempt of a node): the frozen dataclass's
# `__init__` sets each field through `object.__setattr__`; the slots' own setters cost
# about half as much. The same object, fields in the same slots; a field added to Node
# must be added here too (tests/test_executor.py compares the two constructors).
_new_node = object.__new__
_SETTERS = tuple(
    getattr(Node, name).__set__ for name in ("node_id", "kind", "parent_ids", "input", "attempt")
)


def make_node(
    node_id: str, kind: str, parent_ids: tuple[str, ...], input: Any, attempt: int
) -> Node:
    """`Node(node_id, kind, parent_ids, input, attempt)`, faster."""
    node: Node = _new_node(Node)
    set_id, set_kind, set_parents, set_input, set_attempt = _SETTERS
    set_id(node, node_id)
    set_kind(node, kind)
    set_parents(node, parent_ids)
    set_input(node, input)
    set_attempt(node, attempt)
    return node


@dataclass(frozen=True, slots=True)
class Spawn:
    """A successor to create when this node is recorded.

    Its id derives from this node's id and `key` (or its index in the spawn list), so
    replay reproduces it. `after` names sibling keys it joins on; by default its only
    parent is the spawning node.
    """

    kind: str
    input: Any = None
    key: str | None = None
    after: Sequence[str] | None = None


@dataclass(frozen=True, slots=True)
class Wait:
    """A successor that an event delivered to `key` completes, instead of a handler.

    `key` is unique within the run: it is the address events are sent to
    (`Runtime.signal`, `POST /v1/runs/{id}/signals/{key}`, `tether signal`) and, like a
    Spawn's key, what siblings name in `after` to run once the event has arrived. The
    event's payload is the wait's output (`ctx.event(key)`). After `timeout` seconds
    (counted from when the spawning node is recorded) the wait completes as timed out.
    `data` is shown to whoever answers; a payload must fit `schema` (a JSON Schema).
    """

    key: str
    timeout: float | None = None
    data: Any = None
    schema: Mapping[str, Any] | None = None
    after: Sequence[str] | None = None


@dataclass(frozen=True, slots=True)
class Sleep:
    """A durable sleep: a wait that only its timer completes, `seconds` from when the
    spawning node is recorded or `until` a time (seconds since the epoch)."""

    key: str
    seconds: float | None = None
    until: float | None = None
    after: Sequence[str] | None = None


@dataclass(frozen=True, slots=True)
class Event:
    """How a wait completed: the delivered payload, or a timeout (`timed_out`, no payload)."""

    key: str
    payload: Any
    timed_out: bool = False
    event_id: str = ""


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens and cost a node consumed."""

    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    model_calls: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.tokens_in + other.tokens_in,
            self.tokens_out + other.tokens_out,
            self.cost + other.cost,
            self.model_calls + other.model_calls,
        )


# What an attempt used before it counts anything (frozen: one instance serves all).
NOTHING_USED = Usage()


@dataclass(slots=True)
class NodeResult:
    """What a handler returns: its output and the successors it spawns."""

    output: Any = None
    spawn: Sequence[Spawn | Wait | Sleep] = ()
    usage: Usage | None = None
    # Mark this output as the run's result.
    is_result: bool = False
    # Blob refs attached by the handler (tether.blobs.BlobRef).
    blobs: list[Any] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Retry:
    """How often a failed node is retried, and how long to wait in between."""

    attempts: int = 1
    backoff: float = 0.1
    multiplier: float = 2.0
    max_backoff: float = 30.0
    retry_on: tuple[type[BaseException], ...] = (Exception,)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        return float(min(self.max_backoff, self.backoff * self.multiplier ** (attempt - 1)))


@dataclass(frozen=True, slots=True)
class Budget:
    """Limits on a run; 0 means unlimited."""

    max_nodes: int = 0
    max_tokens: int = 0
    max_cost: float = 0.0
    max_wall_s: float = 0.0
    max_turns: int = 0


@dataclass(frozen=True, slots=True)
class StepResult:
    """What a journaled step may return to record its usage along with its output."""

    output: Any = None
    usage: Usage | None = None
