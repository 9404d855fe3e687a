"""Sub-agent runs under a fork (issue 13): forked with their parent as they were at its
fork point; a finished child stays finished, one in flight continues where it was."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.agents import EXECUTIONS, uid
from tests.test_subagents import GATE, REACHED, child
from tether import Context, Node, NodeResult, Registry, Runtime, Spawn, Status, Store
from tether.foundation.errors import RunExists
from tether.foundation.ids import child_run_id
from tether.model.records import decode_log
from tether.ops.fork import fork
from tether.ops.retention import delete_run
from tether.store.base import RunFilter, RunInfo

family = Registry("test.fork.family", entry="plan")


@family.node("plan")
async def plan(ctx: Context, node: Node) -> NodeResult:
    return NodeResult(
        "planned",
        spawn=[Spawn("delegate", node.input, key="d"), Spawn("quick", node.input, key="q")],
    )


@family.node("delegate")
async def delegate(ctx: Context, node: Node) -> NodeResult:
    answer = await ctx.run_child(child, {"n": node.input["n"], "gate": node.input["gate"]})
    return NodeResult({"child said": answer}, is_result=True)


@family.node("quick")
async def quick(ctx: Context, node: Node) -> str:
    if gate := node.input["gate"]:  # recorded while the child waits at its third step
        await REACHED.setdefault(gate, asyncio.Event()).wait()
    return "quick"


async def records_of(store: Store, run_id: str) -> list:  # type: ignore[type-arg]
    return list(decode_log(run_id, await store.log.read_all(run_id)))


def seq_of(records: list, kind: str) -> int:  # type: ignore[type-arg]
    return next(
        i
        for i, r in enumerate(records)
        if r.HasField("node_completed") and r.node_completed.kind == kind
    )


async def test_a_child_in_flight_is_forked_where_it_was_and_continues(store: Store) -> None:
    p, gate = uid("fam"), uid("famgate")
    recorded = asyncio.Event()
    first = Runtime(store)

    def on_record(run_id: str, seq: int, record: Any) -> None:
        if record.HasField("node_completed") and record.node_completed.kind == "quick":
            recorded.set()

    first.events.on_record(on_record)
    task = asyncio.create_task(first.start(family, {"n": 5, "gate": gate}, run_id=p))
    async with asyncio.timeout(60):
        await recorded.wait()
    task.cancel()  # the process "dies" with the child at its third step
    with pytest.raises(asyncio.CancelledError):
        await task
    records = await records_of(store, p)
    delegate_id = next(n.node_id for n in records[1].node_completed.spawned if n.kind == "delegate")
    source_child = child_run_id(p, delegate_id, "")
    kinds = [r.WhichOneof("body") for r in await records_of(store, source_child)]
    assert kinds.count("node_completed") == 2  # steps 0 and 1; step 2 is in flight

    runtime = Runtime(store)
    fork_id = await runtime.fork(p, at_seq=seq_of(records, "quick"))
    forked_child = child_run_id(fork_id, delegate_id, "")
    info = await store.runs.get(forked_child)
    assert info is not None and info.parent_run_id == fork_id and info.status is Status.QUEUED
    head = (await records_of(store, forked_child))[0].run_started
    assert (head.parent_run_id, head.forked_from_run_id, head.forked_from_seq) == (
        fork_id,
        source_child,
        len(kinds) - 1,
    )
    assert await store.log.read_all(forked_child) != await store.log.read_all(source_child)
    assert (await store.log.read_all(forked_child))[1:] == (await store.log.read_all(source_child))[
        1:
    ]

    GATE.setdefault(gate, asyncio.Event()).set()
    outcome = await runtime.resume(fork_id)
    assert (outcome.status, outcome.result) == (Status.SUCCEEDED, {"child said": "5 steps"})
    steps = [
        r.node_completed.node_id
        for r in await records_of(store, forked_child)
        if r.HasField("node_completed")
    ]
    assert len(steps) == len(set(steps)) == 5
    # Steps 0 and 1 were the source child's: they never ran under the fork.
    ran = [k for k in EXECUTIONS if k.startswith(f"{forked_child}:")]
    assert len(ran) == 3


async def test_a_finished_child_stays_finished_and_outlives_its_source(store: Store) -> None:
    p = uid("famdone")
    runtime = Runtime(store)
    source = await runtime.start(family, {"n": 3, "gate": None}, run_id=p)
    assert source.status is Status.SUCCEEDED
    records = await records_of(store, p)
    delegate_id = next(n.node_id for n in records[1].node_completed.spawned if n.kind == "delegate")
    source_child = child_run_id(p, delegate_id, "")
    fork_id = await runtime.fork(p, at_seq=len(records) - 2)
    forked_child = child_run_id(fork_id, delegate_id, "")
    info = await store.runs.get(forked_child)
    assert info is not None and info.status is Status.SUCCEEDED
    assert (await store.retention.log_size([forked_child])).rows == 1  # the rest is referenced
    child_rows = await store.log.read_all(forked_child)
    assert child_rows[1:] == (await store.log.read_all(source_child))[1:]
    await delete_run(store, p)  # the source family goes; the forks keep what they reference
    assert await store.runs.get(source_child) is None
    assert await store.log.read_all(forked_child) == child_rows
    outcome = await runtime.resume(fork_id)
    assert (outcome.status, outcome.result) == (Status.SUCCEEDED, source.result)
    assert not [k for k in EXECUTIONS if k.startswith(f"{forked_child}:")]


async def test_a_refused_fork_leaves_no_sub_agent_fork_behind(store: Store) -> None:
    """The fork and its sub-agent runs' forks are one transaction: when the fork's own row
    is refused (its id is taken), none of its children's forks is created either; they would
    sit queued under a parent that is not theirs, and nothing would ever claim them."""
    p, taken = uid("famrefused"), uid("famtaken")
    runtime = Runtime(store)
    source = await runtime.start(family, {"n": 2, "gate": None}, run_id=p)
    assert source.status is Status.SUCCEEDED
    await store.runs.create(RunInfo(taken, "other", Status.SUCCEEDED), b"its own seq 0")
    records = await records_of(store, p)
    delegate_id = next(n.node_id for n in records[1].node_completed.spawned if n.kind == "delegate")
    with pytest.raises(RunExists):
        await fork(runtime, p, at_seq=len(records) - 2, new_id=taken)
    assert await store.runs.list(where=RunFilter(parent_run_id=taken)) == []
    assert await store.runs.get(child_run_id(taken, delegate_id, "")) is None
    # The same fork under a free id creates the family whole.
    fork_id = await runtime.fork(p, at_seq=len(records) - 2)
    forked = await store.runs.get(child_run_id(fork_id, delegate_id, ""))
    assert forked is not None and forked.status is Status.SUCCEEDED
