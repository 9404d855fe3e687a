"""`Graph.replay` (rehydration's batched loop) gives the graph `apply` gives record by record.

Random logs are built by a small model of a run: nodes complete (spawning plain successors,
fan-outs, joins, waits and sleeps), waits are answered or time out, steps are recorded, nodes
fail, the run pauses, parks, resumes and finishes, timestamps go back and forth; now and then
a record that does not fit is put in (a node completed twice or never spawned, a step of a
completed node, a second run_started, a spawn of an existing node...). The log is applied
record by record and replayed in one call: the two graphs must agree on every field, and a
log that does not fit must fail at the same record with the same message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.foundation.errors import CorruptRecord
from tether.foundation.status import Status
from tether.model import columns
from tether.model import records as r
from tether.model.columns import replay_rows
from tether.model.graph import Graph, GraphError


def _state(g: Graph) -> dict[str, Any]:
    """Everything a graph holds, in comparable form (messages as their bytes, orders kept)."""

    def ser(m: Any) -> bytes | None:
        return None if m is None else bytes(m.SerializeToString(deterministic=True))

    return {
        "started": ser(g.started),
        "agent_version": g.agent_version,
        "specs": [(k, ser(g.spec(k))) for k in list(g._specs)],
        "done": [(k, ser(g.completed(k))) for k in list(g._done)],
        "failed": [(k, ser(v)) for k, v in g._failed.items()],
        "waiting": list(g._waiting.items()),
        "steps": [(k, [(i, ser(s)) for i, s in v.items()]) for k, v in g._steps.items()],
        "waits": list(g.waits.items()),
        "wait_ids": sorted(g._wait_ids),
        "open_waits": list(g.open_waits),
        "ready": list(g.ready),
        "waiters": list(g._waiters.items()),
        "parents": [(k, g.parents_of(k)) for k in g._specs],
        "limits": ser(g.limits),
        "totals": (g.tokens_in, g.tokens_out, g.cost, g.model_calls),
        "status": g.status,
        "reason": g.reason,
        "result_node": g.result_node,
        "finished": ser(g.finished),
        "next_seq": g.next_seq,
        "sessions": (g._session_start_us, g._closed_wall_us, g.last_at_us),
        "pending": [(k, ser(s)) for k, s in g.pending_specs()],
    }


def _completed(spec: r.NodeSpec, *spawned: r.NodeSpec) -> r.Record:
    """A node's record with nothing but its successors."""
    return r.node_completed(
        spec,
        output=r.json_value(0),
        spawned=spawned,
        blobs=(),
        used=r.BudgetUsed(),
        attempt=1,
        started_at_us=1,
    )


def _run(log: list[r.Record], batched: bool) -> tuple[dict[str, Any], str | None]:
    g = Graph("run")
    error = None
    try:
        if batched:
            g.replay(log)
        else:
            for record in log:
                g.apply(record)
    except GraphError as exc:
        error = str(exc)
    return _state(g), error


@st.composite
def logs(draw: st.DrawFn) -> list[r.Record]:
    """A run's log as a model of the executor would write it, with some misfits; now and
    then slim (node records without at_us, specs without their spawner), the shape that
    rehydration reads by columns."""
    at = 1_000
    slim = draw(st.booleans())
    names = iter(f"n{i}" for i in range(10_000))
    log: list[r.Record] = []

    def stamp(record: r.Record) -> r.Record:
        nonlocal at
        at += draw(st.integers(-3, 50))  # clocks of several processes: not monotonic
        if slim and record.node_completed.node_id:
            record.node_completed.finished_at_us = max(at, 0)
        else:
            record.at_us = max(at, 0)
        return record

    def spec(parents: list[str], wait: bool = False, sleep: bool = False) -> r.NodeSpec:
        s = r.NodeSpec(node_id=next(names), kind="k", parent_ids=parents)
        if wait or sleep:
            s.wait.key = f"key-{s.node_id}"
            s.wait.timer_only = sleep
            s.wait.deadline_us = draw(st.integers(0, 5_000))
        return s

    roots = [spec([]) for _ in range(draw(st.integers(1, 2)))]
    started = r.run_started("agent", r.json_value(None), entry="k", root_id="x")
    started.run_started.ClearField("roots")
    started.run_started.roots.extend(roots)
    log.append(stamp(started))
    model = Graph("model")
    model.apply(started)
    everyone = [s.node_id for s in roots]
    for _ in range(draw(st.integers(0, 60))):
        record = _next_record(draw, model, everyone, spec, slim)
        if record is None:
            break
        log.append(stamp(record))
        try:
            model.apply(record)
        except GraphError:
            if draw(st.booleans()):
                break  # a log that ends in a misfit
            log.pop()  # drop it, go on
            continue
        if record.node_completed.node_id:
            everyone += [s.node_id for s in record.node_completed.spawned]
    return log


def _next_record(
    draw: st.DrawFn, g: Graph, everyone: list[str], spec: Any, slim: bool
) -> r.Record | None:
    kind = draw(
        st.sampled_from(
            ["complete"] * 8
            + ["answer", "step", "fail", "pause", "resume", "park", "misfit", "finish"]
        )
    )
    ready = list(g.ready)
    if kind == "complete" and ready:
        nid = draw(st.sampled_from(ready[:3]))
        shapes = ["plain"] * 4 + ["none", "fan"] + ([] if slim else ["join", "wait", "other"])
        shape = draw(st.sampled_from(shapes))
        spawned: list[r.NodeSpec] = []

        def by_nid() -> list[str]:  # the spawner named, or left out (a slim spec)
            return [] if slim or draw(st.booleans()) else [nid]

        if shape == "plain":
            spawned = [spec(by_nid())]
        elif shape == "fan":
            spawned = [spec(by_nid()) for _ in range(draw(st.integers(2, 3)))]
        elif shape == "join":
            first = spec(by_nid())
            spawned = [first, spec([first.node_id, nid])]
        elif shape == "wait":
            w = spec(by_nid(), wait=draw(st.booleans()), sleep=draw(st.booleans()))
            spawned = [w, spec([w.node_id])]
        elif shape == "other":  # a successor after another node, maybe not recorded yet
            spawned = [spec([draw(st.sampled_from(everyone))])]
        record = r.node_completed(
            g.spec(nid),
            output=r.json_value(nid),
            spawned=spawned,
            blobs=(),
            used=r.BudgetUsed(tokens_in=draw(st.integers(0, 5)), cost=draw(st.floats(0, 1))),
            attempt=1,
            started_at_us=1,
            is_result=draw(st.integers(0, 9)) == 0,
        )
        if draw(st.integers(0, 5)) == 0:
            record.ClearField("at_us")  # an unset timestamp reads as 0
            record.node_completed.ClearField("finished_at_us")
        return record
    if kind == "answer" and g.open_waits:
        nid = draw(st.sampled_from(list(g.open_waits)))
        s = g.spec(nid)
        timed_out = s.wait.timer_only or draw(st.booleans())
        return r.wait_completed(s, payload=r.json_value(1), timed_out=timed_out)
    if kind == "step" and ready:
        nid = draw(st.sampled_from(ready))
        index = len(g.steps_of(nid) or {})
        return r.step_recorded(
            nid, index, "s", output=r.json_value(0), used=r.BudgetUsed(), attempt=1, started_at_us=1
        )
    if kind == "fail" and ready:
        return r.node_failed(
            g.spec(draw(st.sampled_from(ready))), ValueError("x"), 1, retryable=True
        )
    if kind == "pause":
        return r.run_paused("drain")
    if kind == "resume":
        return r.run_resumed("me", draw(st.integers(1, 9)), r.BudgetLimits(max_nodes=50))
    if kind == "park":
        return r.run_waiting(list(g.waits), g.wake_at_us())
    if kind == "finish":
        return r.run_finished(Status.SUCCEEDED, result=r.json_value(2))
    if kind == "misfit":
        return _misfit(draw, g, everyone, spec)
    return None if not ready and not g.open_waits else r.run_paused("idle")


def _misfit(draw: st.DrawFn, g: Graph, everyone: list[str], spec: Any) -> r.Record:
    """A record that does not fit the graph (or, by chance, one that does)."""
    which = draw(st.sampled_from(["again", "unknown", "spawn_existing", "early", "step_done"]))
    some = draw(st.sampled_from(everyone))
    if which == "again" and g.order:
        done = draw(st.sampled_from(g.order))
        return _completed(g.spec(done), spec([done]))
    if which == "spawn_existing":
        clash = r.NodeSpec(node_id=some, kind="k", parent_ids=[some])
        nid = draw(st.sampled_from(list(g.ready) or everyone))
        return _completed(g.spec(nid), clash)
    if which == "early":  # a node whose parents are not all recorded, or any node at all
        return _completed(g.spec(some))
    if which == "step_done" and g.order:
        return r.step_recorded(
            g.order[0],
            0,
            "s",
            output=r.json_value(0),
            used=r.BudgetUsed(),
            attempt=1,
            started_at_us=1,
        )
    unknown = r.NodeSpec(node_id="nowhere", kind="k", parent_ids=[])
    return _completed(unknown)


@settings(deadline=None)
@given(logs())
def test_replay_gives_the_graph_apply_gives_record_by_record(log: list[r.Record]) -> None:
    assert _run(log, batched=True) == _run(log, batched=False)


@settings(deadline=None)
@given(logs(), st.integers(0, 3))
def test_replay_in_pieces_then_live_apply_agrees(log: list[r.Record], pieces: int) -> None:
    # A load then a catch-up (replay of what was appended since), then the executor's
    # live applies: the same graph as one pass of apply.
    cuts = sorted({len(log) * i // (pieces + 1) for i in range(1, pieces + 1)})
    g = Graph("run")
    error = None
    try:
        start = 0
        for cut in [*cuts, len(log) - 1]:
            g.replay(log[start:cut])
            start = cut
        for record in log[start:]:
            g.apply(record)
    except GraphError as exc:
        error = str(exc)
    assert (_state(g), error) == _run(log, batched=False)


def test_a_misfit_fails_replay_at_its_record_with_those_before_applied() -> None:
    a = r.NodeSpec(node_id="a", kind="k")
    b = r.NodeSpec(node_id="b", kind="k", parent_ids=["a"])
    started = r.run_started("agent", r.json_value(None), entry="k", root_id="a")
    done_a = _completed(a, b)
    g = Graph("run")
    with pytest.raises(GraphError, match=r"^records node a a second time$"):
        g.replay([started, done_a, done_a])
    assert g.next_seq == 2 and g.order == ["a"] and list(g.ready) == ["b"]


def _rows_run(log: list[r.Record], pieces: int = 0) -> tuple[dict[str, Any], str | None]:
    """The log encoded as rows and loaded as `Runtime.load` does (`replay_rows`), in
    `pieces` + 1 calls (a load, then catch-ups)."""
    rows = [r.encode(record) for record in log]
    cuts = sorted({len(rows) * i // (pieces + 1) for i in range(1, pieces + 1)})
    g = Graph("run")
    error = None
    try:
        start = 0
        for cut in [*cuts, len(rows)]:
            replay_rows(g, rows[start:cut])
            start = cut
    except GraphError as exc:
        error = str(exc)
    return _state(g), error


@settings(deadline=None)
@given(logs(), st.integers(0, 3))
def test_rows_read_by_columns_give_the_graph_apply_gives_record_by_record(
    log: list[r.Record], pieces: int
) -> None:
    assert _rows_run(log, pieces) == _run(log, batched=False)


@settings(deadline=None)
@given(logs(), st.integers(0, 3), st.integers(1, 4))
def test_invariant_5_rows_read_by_columns_in_small_pieces_give_the_same_graph(
    log: list[r.Record], pieces: int, size: int
) -> None:
    # A load reads a long stretch of node records in pieces (columns.PIECE rows at most):
    # pieces of a few rows put their edges everywhere a generated log can.
    saved, columns.PIECE = columns.PIECE, size
    try:
        assert _rows_run(log, pieces) == _run(log, batched=False)
    finally:
        columns.PIECE = saved


@settings(deadline=None)
@given(logs(), st.integers(1, 4))
def test_invariant_5_a_build_that_gives_the_loop_turns_gives_the_graph_applied_gives(
    log: list[r.Record], size: int
) -> None:
    # A resume builds the run while its lease is taken (`columns.applied_turns`: loop turns
    # after each piece of rows): the replay `applied` makes, the same misfit at the same seq.
    rows = [r.encode(record) for record in log]

    def built(build: Callable[[Graph], object]) -> tuple[dict[str, Any], str | None]:
        g, error = Graph("run"), None
        try:
            build(g)
        except CorruptRecord as exc:
            error = str(exc)
        return _state(g), error

    saved, columns.PIECE = columns.PIECE, size
    try:
        plain = built(lambda g: columns.applied(g, rows))
        turned = built(lambda g: asyncio.run(columns.applied_turns(g, rows)))
    finally:
        columns.PIECE = saved
    assert turned == plain


@settings(deadline=None)
@given(logs())
def test_pending_specs_are_the_spawned_nodes_neither_recorded_nor_waits_in_spawn_order(
    log: list[r.Record],
) -> None:
    # pending_specs looks from the newest spawn back and stops once it has them all: after
    # every record it must give what a walk of every spawned node gives.
    g = Graph("run")
    for record in log:
        try:
            g.apply(record)
        except GraphError:
            break
        walk = [nid for nid in g.nodes if g.completed(nid) is None and nid not in g._wait_ids]
        assert [nid for nid, _ in g.pending_specs()] == walk
        assert all(spec is g.spec(nid) for nid, spec in g.pending_specs())


def test_a_chain_is_read_by_columns_and_its_records_decoded_when_asked_for() -> None:
    specs = [r.NodeSpec(node_id=f"n{i}", kind="k") for i in range(4)]
    started = r.run_started("agent", r.json_value(None), entry="k", root_id="x")
    started.run_started.ClearField("roots")
    started.run_started.roots.append(specs[0])
    log = [started] + [_completed(a, b) for a, b in pairwise(specs)]
    g = Graph("run")
    replay_rows(g, [r.encode(record) for record in log])
    assert g.next_seq == 4 and g.order == ["n0", "n1", "n2"] and list(g.ready) == ["n3"]
    assert all(isinstance(g._done[nid], int) for nid in g.order)  # held as their rows
    assert g.parents_of("n2") == ("n1",) and g.spec("n3").node_id == "n3"
    done = g.completed("n1")
    assert done is not None and done.spawned[0].node_id == "n2"
    assert g._done["n1"] is done and isinstance(g._done["n0"], int)


def test_misfits_read_by_columns_fail_as_apply_fails() -> None:
    # A node recorded before it is spawned (by its own record), and a wait completed by a
    # plain node record: rows of the shape read by columns, which must not fit.
    a = r.NodeSpec(node_id="a", kind="k")
    w = r.NodeSpec(node_id="w", kind="k", parent_ids=["a"])
    w.wait.key = "key"
    started = r.run_started("agent", r.json_value(None), entry="k", root_id="a")
    started.run_started.ClearField("roots")
    started.run_started.roots.append(a)
    own = r.NodeSpec(node_id="b", kind="k")
    c, d = r.NodeSpec(node_id="c", kind="k"), r.NodeSpec(node_id="d", kind="k")
    for log in (
        [started, _completed(a, c, d), _completed(c, d)],  # d spawned twice
        [started, _completed(a, r.NodeSpec(node_id="c", kind="k")), _completed(own, own)],
        [started, _completed(a, w), r.run_paused("drain"), _completed(w)],
        [started, _completed(a, c), _completed(c, c)],  # a chain's last spawn exists
        [started, _completed(a, c), _completed(c, d), _completed(c)],  # c recorded twice
    ):
        got = _rows_run(log)
        assert got == _run(log, batched=False) and got[1] is not None
