"""Slim records: a log written whole (by the code before them) and the same run written
slim load into equal graphs and conversations, and every accessor reads both alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import slim_agents
from tests.test_records import read_golden
from tether.agent.loop import conversation_of
from tether.model import records as r
from tether.model.graph import Graph
from tether.model.run_view import node_view, record_view
from tether.model.values import ValueCodec
from tether.store import store_from_url


def graph_of(rows: list[bytes]) -> Graph:
    graph = Graph(slim_agents.RUN_ID)
    for record in r.decode_log(slim_agents.RUN_ID, rows):
        graph.apply(record)
    return graph


# What a node's view says apart from when it ran and what it used (a second run of the
# same conversation differs there only).
SAME = ("node_id", "kind", "parent_ids", "status", "attempt", "spawned", "fallback", "event")


async def test_a_conversation_written_whole_and_slim_loads_into_equal_graphs(
    tmp_path: Path,
) -> None:
    whole = read_golden("v1_agent.log")  # written by the code before slim records
    async with store_from_url(f"sqlite:///{tmp_path}/slim.db") as store:
        slim = await slim_agents.conversation(store)
    old, new = graph_of(whole), graph_of(slim)
    assert new.status == old.status == "succeeded"
    assert set(new.nodes) == set(old.nodes) and new.result_node == old.result_node
    for nid in old.nodes:
        assert new.spec(nid).kind == old.spec(nid).kind
        assert new.parents_of(nid) == old.parents_of(nid) == tuple(old.spec(nid).parent_ids)
        was, now = node_view(old, nid), node_view(new, nid)
        assert {k: now.get(k) for k in SAME} == {k: was.get(k) for k in SAME}
        assert 0 < now["started_at_us"] <= now["finished_at_us"]
    assert (new.model_calls, new.tokens) == (old.model_calls, old.tokens)
    # The conversation each rebuilds, messages whole, is the same.
    conversation = await conversation_of(new, ValueCodec())
    assert conversation == await conversation_of(old, ValueCodec())
    assert [m["role"] for m in conversation] == ["user", "assistant", "tool", "tool", "tool",
                                                 "assistant", "tool", "assistant"]  # fmt: skip
    assert [m.get("is_error") for m in conversation if m["role"] == "tool"] == [
        False, True, True, False
    ]  # fmt: skip
    # And the slim log is the smaller: nothing in it is stored twice.
    assert sum(map(len, slim)) < 0.8 * sum(map(len, whole))


def test_slim_records_leave_out_what_the_reader_derives(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = read_golden("v1_agent.log")
    for seq, whole in enumerate(r.decode_log(slim_agents.RUN_ID, rows)):
        if not whole.HasField("node_completed"):
            continue
        nc = whole.node_completed
        spec = r.NodeSpec(node_id=nc.node_id, kind=nc.kind, parent_ids=nc.parent_ids)
        monkeypatch.setattr(r, "now_us", lambda at=nc.finished_at_us: at)  # written then
        slim = r.node_completed(
            spec, output=nc.output, spawned=nc.spawned, blobs=nc.blobs, used=nc.used,
            attempt=nc.attempt, started_at_us=nc.started_at_us,
            is_result=nc.is_result, fallback=nc.fallback,
        )  # fmt: skip
        s = slim.node_completed
        assert slim.at_us == 0 and not s.parent_ids and s.attempt == 0
        assert r.at_us_of(slim) == r.at_us_of(whole) == whole.at_us
        assert r.started_at_us_of(s) == r.started_at_us_of(nc) == nc.started_at_us
        assert r.attempt_of(s) == r.attempt_of(nc) == 1
        was, now = record_view("x", seq, whole), record_view("x", seq, slim)
        assert was.pop("parent_ids", []) == list(nc.parent_ids)  # none for the root
        assert now == was
        assert len(r.encode(slim)) < len(r.encode(whole))


def _run_with(spawned: list[r.NodeSpec]) -> Graph:
    """A run whose root spawns `spawned`, then each spawned node completes in turn."""
    graph = Graph("g")
    graph.apply(r.run_started("a", r.json_value(None), entry="k", root_id="root"))
    for node_id in ["root", *[s.node_id for s in spawned]]:
        spec = graph.spec(node_id)
        kids = spawned if node_id == "root" else []
        graph.apply(
            r.node_completed(spec, output=r.Value(), spawned=kids, blobs=(), used=r.BudgetUsed(),
                             attempt=1, started_at_us=1)
        )  # fmt: skip
    return graph


def test_a_spawned_spec_without_its_one_parent_has_the_node_that_spawned_it() -> None:
    whole = [r.NodeSpec(node_id="a", kind="k", parent_ids=["root"]),
             r.NodeSpec(node_id="b", kind="k", parent_ids=["root"]),
             r.NodeSpec(node_id="j", kind="k", parent_ids=["a", "b"])]  # fmt: skip
    slim = [r.NodeSpec(node_id="a", kind="k"), r.NodeSpec(node_id="b", kind="k"), whole[2]]
    one_whole = _run_with(whole[:1])
    one_slim = _run_with(slim[:1])  # the fast path: one successor
    for old, new in [(_run_with(whole), _run_with(slim)), (one_whole, one_slim)]:
        assert list(new.nodes) == list(old.nodes) and new.order == old.order
        for nid in old.nodes:
            assert new.parents_of(nid) == old.parents_of(nid) == tuple(old.spec(nid).parent_ids)
            assert node_view(new, nid)["parent_ids"] == node_view(old, nid)["parent_ids"]
    assert _run_with(slim).parents_of("j") == ("a", "b")
    assert _run_with(slim).parents_of("root") == ()
