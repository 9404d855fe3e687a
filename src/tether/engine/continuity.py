"""Can the agent code in this process continue a run? One per-run check, shared by the
worker's claim precheck, `tether runs upgrade`, `tether deploy check` and `tether check`.

A run is continuable here when its agent resolves, its version is this code's own or one
the code declares compatible (`Registry(compatible=[...])`, or a function that says yes),
this code has a handler for every pending node kind, and every pending node's input fits
the shape its kind declares. `check_run` returns every problem it finds (empty: fine),
never raises for a run that does not fit, and records nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from tether.engine.registry import PendingNode, PendingRun, Registry, resolve_agent
from tether.foundation.errors import BadInput, TetherError, UnknownAgent
from tether.model.graph import Graph
from tether.model.values import ValueCodec

# What kind of problem: the agent does not resolve, the run's version is not this code's,
# a pending kind has no handler, a pending input does not fit its declared shape.
What = Literal["agent", "version", "kind", "input"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason the code here cannot continue a run."""

    run_id: str
    what: What
    detail: str
    node_id: str | None = None

    def __str__(self) -> str:
        return f"run {self.run_id}: {self.detail}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "what": self.what,
            "detail": self.detail,
            "node_id": self.node_id,
        }


async def check_run(
    registry: Registry | None,
    graph: Graph,
    *,
    codec: ValueCodec | None = None,
    version: bool = True,
) -> list[Problem]:
    """Why `registry`'s code could not continue `graph` (empty: it can).

    `registry` None resolves the run's agent by name (a problem if it does not resolve).
    `codec` reads pending inputs kept in a blob store (without one, only inline inputs are
    checked). `version=False` leaves the version out (an explicit upgrade, or a replay
    check that runs the code here whatever version the run is on).
    """
    run_id = graph.run_id
    if registry is None:
        try:
            registry = resolve_agent(graph.agent)
        except UnknownAgent as exc:
            return [Problem(run_id, "agent", str(exc))]
    pending = _pending(graph)  # one walk of the run's nodes (a long run has thousands)
    first_of: dict[str, str] = {}  # each missing kind once, at its first pending node
    for node_id, kind in pending:
        if registry.missing([kind]):
            first_of.setdefault(kind, node_id)
    lacks = f"agent {graph.agent!r} here has no handler for pending node kind"
    problems = [
        Problem(run_id, "kind", f"{lacks} {kind!r}", node_id) for kind, node_id in first_of.items()
    ]
    nodes = await pending_nodes(graph, codec or ValueCodec(None), pending)
    for node in nodes:
        shape = registry.input_shape(node.kind)
        if shape is None or node.input is _UNREAD:
            continue
        try:
            shape.check(registry.name, node.input)
        except BadInput as exc:
            problems.append(
                Problem(run_id, "input", f"node {node.node_id} ({node.kind}): {exc}", node.node_id)
            )
    if version and not problems:
        problem = _version_problem(registry, graph, nodes)
        if problem is not None:
            problems.append(problem)
    return problems


def _version_problem(registry: Registry, graph: Graph, nodes: list[PendingNode]) -> Problem | None:
    run_version = graph.agent_version
    if not run_version:  # a run older than versions: any code of its agent may continue it
        return None
    accepts = registry.accepts(run_version)
    if accepts is None:
        assert registry.compatible_fn is not None
        pending = PendingRun(graph.run_id, graph.agent, run_version, tuple(nodes))
        accepts = bool(registry.compatible_fn(pending))
        if not accepts:
            return Problem(
                graph.run_id,
                "version",
                f"run is on version {run_version}; agent {graph.agent!r} here is version "
                f"{registry.version} and its compatible() check says no for this run",
            )
    if accepts:
        return None
    return Problem(
        graph.run_id,
        "version",
        f"run is on version {run_version}; agent {graph.agent!r} here is version "
        f"{registry.version} and does not declare {run_version} compatible",
    )


# An input held in a blob store that was not read (no blob store to read it from).
_UNREAD: Any = object()


def _pending(graph: Graph) -> list[tuple[str, str]]:
    """(node id, kind) of the nodes a handler must still execute, in spawn order."""
    return [(node_id, spec.kind) for node_id, spec in graph.pending_specs()]


async def pending_nodes(
    graph: Graph, codec: ValueCodec, pending: list[tuple[str, str]] | None = None
) -> list[PendingNode]:
    """The run's pending nodes (`pending`: their ids and kinds, if the caller has them) with
    their inputs decoded (`_UNREAD` where one cannot be read here: kept in a blob store, or
    sealed, that this process has not configured)."""
    nodes = []
    for node_id, kind in _pending(graph) if pending is None else pending:
        try:
            decoded = await codec.decode(graph.spec(node_id).input)
        except TetherError:
            decoded = _UNREAD
        nodes.append(PendingNode(node_id, kind, decoded))
    return nodes
