"""Journaled steps inside a node: recorded once, replayed in order, mismatches pause the run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests import step_agents as sa
from tether import Budget, Runtime, Status, Store
from tether.blobs import LocalBlobStore
from tether.model.records import blob_refs, decode_log
from tether.model.run_view import record_view, run_view


@pytest.fixture(autouse=True)
def _reset() -> None:
    sa.FLOW_STEPS[:] = ["plan", "fetch", "write"]
    sa.HANG_AT.clear()


async def records(store: Store, run_id: str) -> list[Any]:
    return list(decode_log(run_id, await store.log.read_all(run_id)))


async def crash_at(store: Store, step: str) -> str:
    """Start a flow run and kill it (cancel, nothing more recorded) while `step` runs."""
    reached = sa.HANG_AT[step] = asyncio.Event()
    rt = Runtime(store)
    run_id = f"steps-{step}-{id(store)}"
    task = asyncio.ensure_future(rt.start(sa.steps_agent, None, run_id=run_id))
    await reached.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    sa.HANG_AT.clear()
    return run_id


async def test_invariant_1_a_recorded_step_is_never_run_again(durable_store: Store) -> None:
    run_id = await crash_at(durable_store, "write")
    before = [r.WhichOneof("body") for r in await records(durable_store, run_id)]
    assert before == ["run_started", "step_recorded", "step_recorded"]
    outcome = await Runtime(durable_store).resume(run_id)
    assert outcome.status is Status.SUCCEEDED
    assert [r["name"] for r in outcome.result] == ["plan", "fetch", "write"]
    # plan and fetch ran once (before the crash); write ran twice (killed, then for real).
    assert [sa.CALLS[f"{run_id}/{n}"] for n in ("plan", "fetch", "write")] == [1, 1, 2]
    steps = [r.step_recorded for r in await records(durable_store, run_id) if r.step_recorded.name]
    assert [(s.index, s.name) for s in steps] == [(0, "plan"), (1, "fetch"), (2, "write")]
    # Step usage counts once, in the run's totals.
    assert outcome.graph.tokens == 3 * 15
    assert outcome.graph.cost == pytest.approx(0.03)


async def test_a_step_that_differs_from_its_record_pauses_the_run_naming_both(
    durable_store: Store,
) -> None:
    run_id = await crash_at(durable_store, "write")
    sa.FLOW_STEPS[:] = ["plan", "search", "write"]  # the code changed before the resume
    outcome = await Runtime(durable_store).resume(run_id)
    assert outcome.status is Status.PAUSED
    assert "non-deterministic step 1" in outcome.reason
    assert "'fetch'" in outcome.reason and "'search'" in outcome.reason
    # Nothing of the node was recorded, it did not fail, and nothing re-ran.
    bodies = [r.WhichOneof("body") for r in await records(durable_store, run_id)]
    assert "node_failed" not in bodies and "node_completed" not in bodies
    assert sa.CALLS[f"{run_id}/search"] == 0
    # The old code back: the run resumes and finishes from its recorded steps.
    sa.FLOW_STEPS[:] = ["plan", "fetch", "write"]
    done = await Runtime(durable_store).resume(run_id)
    assert done.status is Status.SUCCEEDED
    assert [sa.CALLS[f"{run_id}/{n}"] for n in ("plan", "fetch")] == [1, 1]


async def test_a_handler_that_stops_before_its_recorded_steps_pauses(store: Store) -> None:
    run_id = await crash_at(store, "write")
    sa.FLOW_STEPS[:] = ["plan"]
    outcome = await Runtime(store).resume(run_id)
    assert outcome.status is Status.PAUSED
    assert "'fetch'" in outcome.reason and "no step (the end)" in outcome.reason


async def test_steps_started_together_replay_by_start_order(store: Store) -> None:
    outcome = await Runtime(store).start(sa.steps_fanout, 5)
    assert outcome.status is Status.SUCCEEDED
    assert [r["i"] for r in outcome.result] == [0, 1, 2, 3, 4]
    steps = {
        r.step_recorded.index: r.step_recorded.name
        for r in await records(store, outcome.run_id)
        if r.HasField("step_recorded")
    }
    assert steps == {i: f"tool{i}" for i in range(5)}


async def test_a_step_is_retried_by_its_own_policy(store: Store) -> None:
    outcome = await Runtime(store).start(sa.steps_flaky, {"fail_times": 2})
    assert outcome.status is Status.SUCCEEDED
    assert outcome.result == "ok after 3"
    (step,) = [
        r.step_recorded for r in await records(store, outcome.run_id) if r.HasField("step_recorded")
    ]
    assert step.attempt == 3
    # Past its attempts, the step's error is the node's: no step record, the node fails.
    failed = await Runtime(store).start(sa.steps_flaky, {"fail_times": 5})
    assert failed.status is Status.FAILED
    assert "ConnectionError" in failed.reason
    bodies = [r.WhichOneof("body") for r in await records(store, failed.run_id)]
    assert "step_recorded" not in bodies


async def test_a_step_past_its_timeout_is_retried(store: Store) -> None:
    outcome = await Runtime(store).start(
        sa.steps_flaky, {"fail_times": 1, "sleep_s": 30, "timeout_s": 0.05}
    )
    assert outcome.status is Status.SUCCEEDED
    assert outcome.result == "ok after 2"


async def test_invariant_7_a_budget_spent_between_steps_pauses_and_resumes(store: Store) -> None:
    # Each step uses 15 tokens: the limit of 20 is reached after two steps, before the third.
    outcome = await Runtime(store).start(sa.steps_agent, None, budget=Budget(max_tokens=20))
    assert outcome.status is Status.PAUSED
    assert "token limit 20" in outcome.reason and "'write'" in outcome.reason
    run_id = outcome.run_id
    assert sa.CALLS[f"{run_id}/write"] == 0
    done = await Runtime(store).resume(run_id, budget=Budget(max_tokens=100))
    assert done.status is Status.SUCCEEDED
    assert [sa.CALLS[f"{run_id}/{n}"] for n in ("plan", "fetch", "write")] == [1, 1, 1]


async def test_a_large_step_result_goes_to_the_blob_store(store: Store, tmp_path: Path) -> None:
    async with LocalBlobStore(tmp_path / "blobs") as blobs:
        outcome = await Runtime(store, blobs=blobs).start(sa.steps_big, None)
        assert outcome.status is Status.SUCCEEDED and outcome.result == 10_000
        recs = await records(store, outcome.run_id)
        refs = [where for r in recs for where, _ in blob_refs(r)]
        assert refs == ["output of step 0 of node " + recs[0].run_started.roots[0].node_id]
        # Replayed from the blob: the graph rebuilt from the log holds the step's ref.
        graph = await Runtime(store, blobs=blobs).load(outcome.run_id)
        root = graph.nodes[recs[0].run_started.roots[0].node_id]
        assert root.steps is not None and root.steps[0].output.WhichOneof("kind") == "blob"


async def test_steps_show_as_children_of_their_node(store: Store) -> None:
    outcome = await Runtime(store).start(sa.steps_agent, None)
    view = run_view(await Runtime(store).load(outcome.run_id))
    (node,) = view["nodes"]
    assert [s["name"] for s in node["steps"]] == ["plan", "fetch", "write"]
    assert view["budget"]["used"]["tokens_in"] == 30
    recs = await records(store, outcome.run_id)
    step_view = record_view(outcome.run_id, 1, recs[1])
    assert step_view["body"] == "step_recorded"
    assert step_view["step"] == {"index": 0, "name": "plan", "attempt": 1}
    assert step_view["output"] == {"name": "plan", "i": 0}


async def test_tether_show_lists_steps_under_their_node(store: Store) -> None:
    from rich.console import Console

    from tether.cli.display import graph_tree

    outcome = await Runtime(store).start(sa.steps_agent, None)
    console = Console(record=True, width=120)
    console.print(graph_tree(await Runtime(store).load(outcome.run_id)))
    text = console.export_text()
    lines = [line.strip(" │├└─") for line in text.splitlines()]
    assert [line.split("  ")[0] for line in lines if line.startswith("step ")] == [
        "step 0 plan",
        "step 1 fetch",
        "step 2 write",
    ]
    assert "15 tok" in text


def test_a_step_record_that_does_not_fit_the_graph_is_refused() -> None:
    from tether.model import records as r
    from tether.model.graph import Graph, GraphError

    graph = Graph("g")
    graph.apply(r.run_started("a", r.json_value(None), entry="flow", root_id="root"))

    def step(node_id: str, index: int) -> Any:
        out, used = r.json_value(index), r.BudgetUsed()
        return r.step_recorded(
            node_id, index, "s", output=out, used=used, attempt=1, started_at_us=0
        )

    with pytest.raises(GraphError, match="never spawned"):
        graph.check(step("nope", 0))
    graph.apply(step("root", 0))
    with pytest.raises(GraphError, match="a second time"):
        graph.check(step("root", 0))
    spec = graph.spec("root")
    done = r.node_completed(
        spec, output=r.json_value(1), spawned=(), blobs=(), used=r.BudgetUsed(), attempt=1,
        started_at_us=0,
    )  # fmt: skip
    graph.apply(done)
    with pytest.raises(GraphError, match="not running"):
        graph.check(step("root", 1))
