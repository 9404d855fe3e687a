"""Cancelling a run: in-flight nodes stop unrecorded, the log ends with RunFinished CANCELLED."""

from __future__ import annotations

import asyncio

import pytest

from tests.agents import uid
from tests.test_subagents import GATE, REACHED, parent
from tether import (
    Budget,
    Context,
    Node,
    NodeResult,
    Registry,
    RunNotResumable,
    Runtime,
    Spawn,
    Status,
    Store,
)
from tether.foundation.ids import child_run_id
from tether.model.records import decode_log

slow = Registry("test.cancel.slow", entry="start")
STARTED: dict[str, asyncio.Event] = {}


@slow.node("start")
async def start(ctx: Context, node: Node) -> NodeResult:
    return NodeResult("go", spawn=[Spawn("wait", node.input, key=f"w{i}") for i in range(3)])


@slow.node("wait")
async def wait(ctx: Context, node: Node) -> None:
    if node.input == "must not start":
        # Fail the run at once rather than hang: the test expected a pause before this.
        raise RuntimeError("a node started past the run's node limit")
    STARTED.setdefault(ctx.run_id, asyncio.Event()).set()
    await asyncio.Event().wait()  # never finishes on its own


def bodies(records: list[object]) -> list[str | None]:
    return [r.WhichOneof("body") for r in records]  # type: ignore[attr-defined]


async def test_cancel_stops_in_flight_nodes_and_records_cancelled(store: Store) -> None:
    runtime = Runtime(store)
    run_id = uid("c")
    STARTED[run_id] = asyncio.Event()
    task = asyncio.create_task(runtime.start(slow, run_id=run_id))
    await STARTED[run_id].wait()
    outcome = await runtime.cancel(run_id)
    assert outcome.status is Status.CANCELLED
    assert (await task).status is Status.CANCELLED
    records = list(decode_log(run_id, await store.log.read_all(run_id)))
    assert bodies(records) == ["run_started", "node_completed", "run_finished"]
    assert (await store.runs.get(run_id)).status is Status.CANCELLED  # type: ignore[union-attr]
    with pytest.raises(RunNotResumable):
        await runtime.cancel(run_id)


async def test_cancel_of_a_paused_run_appends_the_finish(store: Store) -> None:
    runtime = Runtime(store)
    run_id = uid("p")
    paused = await runtime.start(slow, "must not start", run_id=run_id, budget=Budget(max_nodes=1))
    assert (paused.status, paused.reason) == (Status.PAUSED, "budget: node limit 1 reached")
    outcome = await Runtime(store).cancel(run_id)
    assert outcome.status is Status.CANCELLED and outcome.graph.status == "cancelled"
    with pytest.raises(RunNotResumable):
        await runtime.resume(run_id)


async def test_cancel_reaches_the_sub_agent_runs_executing_here(store: Store) -> None:
    runtime = Runtime(store)
    run_id, gate = uid("pc"), uid("gate")
    REACHED[gate] = asyncio.Event()
    task = asyncio.create_task(runtime.start(parent, {"n": 5, "gate": gate}, run_id=run_id))
    await REACHED[gate].wait()
    children = [r for r in runtime.executing if r.startswith(f"{run_id}.")]
    assert len(children) == 1
    outcome = await runtime.cancel(run_id)
    assert outcome.status is Status.CANCELLED
    assert (await task).status is Status.CANCELLED
    child = await store.runs.get(children[0])
    assert child is not None and child.status is Status.CANCELLED
    child_log = decode_log(children[0], await store.log.read_all(children[0]))
    assert child_log[-1].run_finished.error == "cancelled by request"
    # The child is the delegate node's, under the id derived from it.
    [delegate] = [n for n, state in outcome.graph.nodes.items() if state.spec.kind == "delegate"]
    assert children == [child_run_id(run_id, delegate)]
    GATE.pop(gate, None)
