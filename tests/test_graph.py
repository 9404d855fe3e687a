"""The graph: fast and general apply paths agree; node states are read-only snapshots."""

from __future__ import annotations

import dataclasses
import gc
import itertools
import weakref

import pytest

from tether.model import records as r
from tether.model.graph import Graph, GraphError


def _spec(node_id: str, *parents: str) -> r.NodeSpec:
    return r.NodeSpec(node_id=node_id, kind="k", parent_ids=list(parents))


def _done(spec: r.NodeSpec, *spawned: r.NodeSpec, tokens: int = 0) -> r.Record:
    return r.node_completed(
        spec,
        output=r.json_value(None),
        spawned=spawned,
        blobs=(),
        used=r.BudgetUsed(tokens_in=tokens),
        attempt=1,
        started_at_us=1,
    )


def _started(*roots: r.NodeSpec) -> r.Record:
    record = r.run_started("agent", r.json_value(None), entry="k", root_id="a")
    record.run_started.ClearField("roots")
    record.run_started.roots.extend(roots)
    return record


def test_chain_then_join_tracks_waiting_ready_and_budget() -> None:
    a, b, c = _spec("a"), _spec("b", "a"), _spec("c", "a")
    j = _spec("j", "b", "c")
    g = Graph("run")
    assert g.apply(_started(a)) == ["a"]
    # a spawns b, c (fast path: one parent, the node itself) and j joining both.
    assert g.apply(_done(a, b, c, j, tokens=3)) == ["b", "c"]
    assert g.nodes["j"].waiting == 2 and g.pending == 3
    assert g.apply(_done(b)) == []
    assert g.nodes["j"].waiting == 1
    assert g.apply(_done(c, tokens=4)) == ["j"]
    assert list(g.ready) == ["j"] and g.nodes["j"].waiting == 0
    assert g.apply(_done(j)) == []
    assert g.order == ["a", "b", "c", "j"] and g.completed_count == 4 and g.pending == 0
    assert g.tokens_in == 7 and g.next_seq == 5
    assert list(g.nodes) == ["a", "b", "c", "j"]
    state = g.nodes["c"]
    assert state.completed is g.completed("c") and state.spec.node_id == "c"


def test_node_states_are_read_only_snapshots() -> None:
    g = Graph("run")
    g.apply(_started(_spec("a")))
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.nodes["a"].waiting = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("records", "message"),
    [
        (lambda a: [_done(a), _done(a)], "a second time"),
        (lambda a: [_done(_spec("x", "a"))], "never spawned"),
        (lambda a: [_done(a, _spec("a", "a"))], "already exists"),
        (lambda a: [_done(a, _spec("y", "nope"))], "unknown node nope"),
        (lambda a: [_done(a, _spec("b", "a"), _spec("b", "a"))], "already exists"),
    ],
)
def test_records_that_do_not_fit_are_refused_before_anything_changes(
    records: object, message: str
) -> None:
    a = _spec("a")
    g = Graph("run")
    g.apply(_started(a))
    *fine, bad = records(a)  # type: ignore[operator]
    for record in fine:
        g.apply(record)
    before = (list(g.nodes), list(g.ready), g.order, g.next_seq)
    with pytest.raises(GraphError, match=message):
        g.apply(bad)
    assert (list(g.nodes), list(g.ready), g.order, g.next_seq) == before


@pytest.mark.parametrize(
    ("records", "successor"),
    [
        (lambda a: [_done(a), _done(a)], None),
        (lambda a: [_done(_spec("x", "a"))], None),
        (lambda a: [_done(a, _spec("a"))], "a"),
        (lambda a: [_done(a, _spec("b")), _done(_spec("b"), _spec("a"))], "a"),
    ],
)
def test_invariant_4_the_executors_check_of_a_plain_record_refuses_what_check_refuses(
    records: object, successor: str | None
) -> None:
    """`check_plain` (the executor's check of its common record, from what it spawned)
    gives the same GraphError as `check` of the whole record: a node recorded twice, or a
    successor whose id the run already has (a node id is unique within a run)."""
    a = _spec("a")
    g = Graph("run")
    g.apply(_started(a))
    *fine, bad = records(a)  # type: ignore[operator]
    for record in fine:
        g.apply(record)
    with pytest.raises(GraphError) as full:
        g.check(bad)
    with pytest.raises(GraphError) as plain:
        g.check_plain(bad.node_completed, successor, bad.node_completed.node_id)
    assert str(plain.value) == str(full.value)
    ok = _done(_spec(next(iter(g.ready))), _spec("fresh")) if g.ready else None
    if ok is not None:  # and what check accepts, it accepts
        g.check(ok)
        g.check_plain(ok.node_completed, "fresh", ok.node_completed.node_id)


def _used(spec: r.NodeSpec, *spawned: r.NodeSpec, cost: float) -> r.Record:
    record = _done(spec, *spawned, tokens=1)
    record.node_completed.used.cost = cost
    record.node_completed.used.model_calls = 1
    return record


def test_budget_totals_read_after_a_replay_equal_those_read_after_each_record() -> None:
    # The totals are summed when read: a replay read once at the end and a run read after
    # every record give the same numbers, the float cost summed in record order (the costs
    # are chosen so that summing the step's cost last would give another total).
    chain = [_spec("a")] + [_spec(f"n{i}", "a" if i == 0 else f"n{i - 1}") for i in range(30)]
    costs = [0.1, 1e-17, 0.7, 1e16, 3.0, -1e16] * 5
    step = r.step_recorded(
        "n3",
        0,
        "s",
        output=r.json_value(None),
        used=r.BudgetUsed(cost=1.0),
        attempt=1,
        started_at_us=1,
    )
    log = [_started(chain[0])]
    for i, (spec, successor) in enumerate(itertools.pairwise(chain)):
        log.append(_used(spec, successor, cost=costs[i]))
        if spec.node_id == "n2":
            log.append(step)  # n3 is running: its step is recorded before it completes
    eager, lazy = Graph("run"), Graph("run")
    calls = []
    for record in log:
        eager.apply(record)
        lazy.apply(record)
        calls.append(eager.model_calls)  # read after each record
    assert calls == [0, 1, 2, 3, 4, 4, *range(5, len(chain))]
    in_order = step_last = 0.0
    for c in [*costs[:4], 1.0, *costs[4:]]:
        in_order += c
    for c in [*costs, 1.0]:
        step_last += c
    assert in_order != step_last
    assert lazy.cost == eager.cost == in_order
    assert lazy.tokens_in == lazy.model_calls == len(chain) - 1


def test_a_graph_is_freed_with_its_last_reference_not_by_the_collector() -> None:
    """A graph holds no reference to itself (its `nodes` view is made on access): a run's
    graph, its specs and records go when the run does, instead of waiting, with everything
    they hold, for a full collection that must then walk them (a 10,000-node chain on
    memory: 25.7-27 -> 22.3-22.5 us a node, the graphs of the runs before no longer walked)."""
    root = _spec("a")
    g = Graph("run")
    g.apply(_started(root))
    g.apply(_done(root, _spec("b")))
    assert "b" in g.nodes and g.nodes["a"].completed is not None
    gone = weakref.ref(g)
    gc.disable()
    try:
        del g
        assert gone() is None
    finally:
        gc.enable()
