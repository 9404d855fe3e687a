"""The per-run check: can the agent code here continue a run (deploys, upgrades, replays)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.agents import uid
from tether import Budget, Context, Node, NodeResult, Registry, Runtime, Spawn, Store
from tether.engine.continuity import Problem, check_run
from tether.engine.registry import PendingRun
from tether.foundation.errors import CannotContinue

SHAPE = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def _v1(name: str) -> Registry:
    agent = Registry(name, version="1")
    agent.add("plan", _noop)
    return agent


def _v2(name: str, **kw: Any) -> Registry:
    """Release 2 of the same agent: `plan` renamed `outline`, a shaped `search` added."""
    agent = Registry(name, version="2", entry="outline", **kw)
    agent.add("outline", _noop)
    agent.add("search", _noop, input=SHAPE)
    return agent


async def _queued(store: Store, agent: Registry) -> Any:
    runtime = Runtime(store)
    run_id = await runtime.submit(agent, {"q": "x"})
    return await runtime.load(run_id)


async def test_check_run_names_the_kinds_the_version_and_the_inputs(store: Store) -> None:
    name = uid("compat")
    graph = await _queued(store, _v1(name))
    assert await check_run(_v1(name), graph) == []  # its own code

    problems = await check_run(_v2(name), graph)
    assert [p.what for p in problems] == ["kind"]
    assert problems[0].node_id == "root"
    assert "no handler for pending node kind 'plan'" in str(problems[0])
    assert str(problems[0]).startswith(f"run {graph.run_id}: ")

    # Same kinds, another version that does not list 1: the version is the problem.
    same = Registry(name, version="3")
    same.add("plan", _noop)
    [problem] = await check_run(same, graph)
    assert problem.what == "version"
    assert "run is on version 1" in problem.detail and "does not declare 1" in problem.detail
    listed = Registry(name, version="3", compatible=["1"])
    listed.add("plan", _noop)
    assert await check_run(listed, graph) == []
    assert [p.what for p in await check_run(same, graph, version=False)] == []


async def test_a_compatible_function_sees_the_pending_nodes_and_their_inputs(store: Store) -> None:
    name = uid("compat.fn")
    seen: list[PendingRun] = []

    def only_plain(run: PendingRun) -> bool:
        seen.append(run)
        return all(n.input != {"q": "no"} for n in run.nodes)

    code = Registry(name, version="9", compatible=only_plain)
    code.add("plan", _noop)
    yes = await _queued(store, _v1(name))
    assert await check_run(code, yes) == []
    assert seen[0].version == "1" and seen[0].kinds == ["plan"]
    assert seen[0].nodes[0].input == {"q": "x"} and seen[0].run_id == yes.run_id
    runtime = Runtime(store)
    no = await runtime.load(await runtime.submit(_v1(name), {"q": "no"}))
    [problem] = await check_run(code, no)
    assert problem.what == "version" and "compatible() check says no" in problem.detail


async def test_pending_inputs_must_fit_the_declared_shape_of_their_kind(store: Store) -> None:
    name = uid("compat.input")
    v1 = Registry(name, version="1")

    @v1.node("plan")
    async def plan(ctx: Context, node: Node) -> NodeResult:
        return NodeResult(
            spawn=[Spawn("search", {"q": 7}, key="a"), Spawn("search", {"q": "ok"}, key="b")]
        )

    @v1.node("search")
    async def search(ctx: Context, node: Node) -> None:
        raise RuntimeError("never runs: the run pauses first")

    runtime = Runtime(store)
    graph = await runtime.create(v1, {"q": "x"})
    # Record `plan` only: execute with a budget of one node, so the searches stay pending.
    await runtime.resume(graph.run_id, budget=Budget(max_nodes=1))
    graph = await runtime.load(graph.run_id)
    assert sorted(graph.pending_kinds()) == ["search"]
    problems = await check_run(_v2(name, compatible=["1"]), graph)
    [problem] = problems
    assert isinstance(problem, Problem) and problem.what == "input", problems
    assert "at q: 7 is not of type 'string'" in problem.detail, problem
    assert problem.node_id is not None and problem.node_id in problem.detail


async def test_runtime_gives_back_a_run_this_code_does_not_accept(store: Store) -> None:
    """Invariant 10 with versions: code of another version records nothing."""
    name = uid("compat.rt")
    graph = await _queued(store, _v1(name))
    runtime = Runtime(store)
    same = Registry(name, version="3")  # registered under the run's name: what resolves now
    same.add("plan", _noop)
    with pytest.raises(CannotContinue, match="run is on version 1"):
        await runtime.resume(graph.run_id)
    assert (await runtime.load(graph.run_id)).next_seq == graph.next_seq
    info = await store.runs.get(graph.run_id)
    assert info is not None and info.status.value == "queued"
    assert "waiting for a worker that can continue it" in (info.reason or "")

    moved = Registry(name, version="4", compatible=["1"])  # the next release accepts it
    moved.add("plan", _noop)
    outcome = await runtime.resume(graph.run_id)
    assert outcome.status.value == "succeeded"
    after = await runtime.load(graph.run_id)
    assert after.agent_version == "4"  # the move is recorded (RunResumed.agent_version)
    assert after.started is not None and after.started.agent_version == "1"


async def _noop(ctx: Context, node: Node) -> None:
    return None
