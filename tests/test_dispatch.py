"""Record bodies are dispatched exhaustively; run status and budgets convert in one place."""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest

from tether import Budget, Status
from tether.model.records import (
    Body,
    Record,
    budget_of,
    limits_of,
    run_finished,
    run_paused,
)

SRC = Path(__file__).resolve().parents[1] / "src" / "tether"

# Functions that read the body name without dispatching on it: the typed accessor itself,
# the label for logs and metrics, and the decoder's check that a body is there at all.
NOT_DISPATCH = {
    "model/records.py:body_of",
    "model/records.py:label_of",
    "model/records.py:decode_one",
}


def test_the_body_literal_names_every_body_of_the_schema() -> None:
    # A body added to the .proto must be added to Body: then mypy shows every reader
    # that does not handle it (each ends its match with assert_never).
    schema = [f.name for f in Record.DESCRIPTOR.oneofs_by_name["body"].fields]
    assert list(typing.get_args(Body)) == schema


def _reads_body(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if not isinstance(sub, ast.Call):
            continue
        f = sub.func
        if isinstance(f, ast.Name) and f.id == "body_of":
            return True
        if (
            isinstance(f, ast.Attribute)
            and f.attr == "WhichOneof"
            and sub.args
            and isinstance(sub.args[0], ast.Constant)
            and sub.args[0].value == "body"
        ):
            return True
    return False


def _dispatches_exhaustively(fn: ast.AST) -> bool:
    for sub in ast.walk(fn):
        if isinstance(sub, ast.Match):
            last = sub.cases[-1]
            calls = [c for c in ast.walk(last) if isinstance(c, ast.Call)]
            if any(isinstance(c.func, ast.Name) and c.func.id == "assert_never" for c in calls):
                return True
    return False


def test_every_reader_of_a_record_body_matches_it_exhaustively() -> None:
    readers, lax = [], []
    for path in SRC.rglob("*.py"):
        if "_proto" in path.parts:
            continue
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            where = f"{path.relative_to(SRC)}:{fn.name}"
            if where in NOT_DISPATCH or not _reads_body(fn):
                continue
            readers.append(where)
            if not _dispatches_exhaustively(fn):
                lax.append(where)
    assert lax == []
    # The check sees the readers it is meant for.
    # (Graph.apply tells a NodeCompleted by its node id and dispatches every other body in
    # Graph._apply_other.)
    expected = {
        "model/graph.py:_apply_other",
        "model/graph.py:check",
        "model/run_view.py:record_view",
    }
    assert expected <= set(readers)


def test_run_status_converts_to_the_record_and_back() -> None:
    for status in (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED):
        record = run_finished(status)
        assert Status.from_pb(record.run_finished.status) is status
    with pytest.raises(ValueError, match="running"):
        Status.RUNNING.to_pb()
    # An unset (or newer) value is a finished run that did not succeed.
    assert Status.from_pb(0) is Status.FAILED  # type: ignore[arg-type]


def test_a_run_finished_record_sets_the_graph_status() -> None:
    from tether.model.graph import Graph
    from tether.model.records import json_value, run_started

    for status in (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED):
        graph = Graph("r")
        graph.apply(run_started("a", json_value(None), entry="e", root_id="root"))
        graph.apply(run_paused("x"))
        assert graph.status is Status.PAUSED
        graph.apply(run_finished(status, error="why"))
        assert graph.status is status and graph.reason == "why"


@pytest.mark.parametrize(
    "budget",
    [
        Budget(),
        Budget(max_nodes=3, max_tokens=5000, max_cost=1.25, max_wall_s=2.5, max_turns=7),
    ],
)
def test_budget_limits_round_trip(budget: Budget) -> None:
    assert budget_of(limits_of(budget)) == budget
    assert limits_of(None) == limits_of(Budget())
