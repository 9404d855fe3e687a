"""Forking a run (issue 13): a queued run whose log is the source's records up to a seq,
with overridden outputs; it runs to completion recording each node once. SQLite and
PostgreSQL."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.agents import fanout, uid
from tests.step_agents import CALLS, steps_agent
from tests.waits_agents import approvals
from tether import (
    BadFork,
    Budget,
    Context,
    Node,
    NodeResult,
    Registry,
    Runtime,
    Spawn,
    Status,
    Store,
    UnknownRun,
)
from tether.foundation.ids import ROOT_ID, child_id
from tether.model.history import checkpoints
from tether.model.records import body_of, decode_log

TOOL, ANSWER = child_id(ROOT_ID, "tool"), child_id(ROOT_ID, "answer")

tool_chain = Registry("test.fork.tool_chain", entry="ask")


@tool_chain.node("ask")
async def ask(ctx: Context, node: Node) -> NodeResult:
    return NodeResult(
        {"q": node.input},
        spawn=[
            Spawn("tool", node.input, key="tool"),
            Spawn("answer", None, key="answer", after=["tool"]),
        ],
    )


@tool_chain.node("tool")
async def tool(ctx: Context, node: Node) -> int:
    return int(node.input) * 2


@tool_chain.node("answer")
async def answer(ctx: Context, node: Node) -> NodeResult:
    outputs = await ctx.parent_outputs()
    return NodeResult(f"the answer is {sum(outputs.values())}", is_result=True)


async def records_of(store: Store, run_id: str) -> list:  # type: ignore[type-arg]
    return list(decode_log(run_id, await store.log.read_all(run_id)))


def completed_ids(records: list) -> list[str]:  # type: ignore[type-arg]
    return [r.node_completed.node_id for r in records if r.HasField("node_completed")]


async def test_invariant_9_fork_at_every_seq_runs_to_completion_recording_each_node_once(
    durable_store: Store,
) -> None:
    runtime = Runtime(durable_store)
    source = await runtime.start(fanout, {"width": 3}, run_id=uid("src"))
    assert source.status is Status.SUCCEEDED
    src_rows = await durable_store.log.read_all(source.run_id)
    src_records = decode_log(source.run_id, src_rows)
    last = len(src_rows) - 1
    assert body_of(src_records[last]) == "run_finished"
    for seq in range(last):
        fork_id = await runtime.fork(source.run_id, at_seq=seq)
        info = await durable_store.runs.get(fork_id)
        assert info is not None and info.status is Status.QUEUED and info.owner is None
        rows = await durable_store.log.read_all(fork_id)
        assert len(rows) == seq + 1
        # The prefix is the source's records, byte for byte, after the fork's seq 0.
        assert rows[1:] == src_rows[1 : seq + 1]
        head = decode_log(fork_id, rows[:1])[0].run_started
        assert (head.forked_from_run_id, head.forked_from_seq) == (source.run_id, seq)
        outcome = await runtime.resume(fork_id)
        assert outcome.status is Status.SUCCEEDED
        assert outcome.result == source.result
        ids = completed_ids(await records_of(durable_store, fork_id))
        assert len(ids) == len(set(ids)) == len(completed_ids(list(src_records)))


async def test_overriding_a_tool_result_changes_what_follows(durable_store: Store) -> None:
    runtime = Runtime(durable_store)
    source = await runtime.start(tool_chain, 5, run_id=uid("tool"))
    assert source.result == "the answer is 10"
    fork_id = await runtime.fork(source.run_id, before_node=ANSWER, set_outputs={TOOL: 21})
    head = (await records_of(durable_store, fork_id))[0].run_started
    assert list(head.overridden_node_ids) == [TOOL]
    outcome = await runtime.resume(fork_id)
    assert (outcome.status, outcome.result) == (Status.SUCCEEDED, "the answer is 21")
    # The source is untouched.
    assert (await runtime.outcome(source.run_id)).result == "the answer is 10"


async def test_fork_before_a_node_runs_it_again_and_keeps_earlier_ones(
    durable_store: Store,
) -> None:
    runtime = Runtime(durable_store)
    source = await runtime.start(tool_chain, 3, run_id=uid("before"))
    fork_id = await runtime.fork(source.run_id, before_node=TOOL)
    records = await records_of(durable_store, fork_id)
    assert TOOL not in completed_ids(records)
    outcome = await runtime.resume(fork_id)
    assert outcome.result == source.result
    ids = completed_ids(await records_of(durable_store, fork_id))
    assert Counter(ids) == Counter(completed_ids(await records_of(durable_store, source.run_id)))


async def test_fork_of_a_fork_and_new_limits(durable_store: Store) -> None:
    runtime = Runtime(durable_store)
    source = await runtime.start(fanout, {"width": 4}, run_id=uid("limits"))
    first = await runtime.fork(source.run_id, at_seq=1)
    second = await runtime.fork(first, at_seq=1, budget=Budget(max_nodes=2))
    head = (await records_of(durable_store, second))[0].run_started
    assert (head.forked_from_run_id, head.forked_from_seq) == (first, 1)
    outcome = await runtime.resume(second)
    assert outcome.status is Status.PAUSED  # four more work nodes do not fit in two
    assert (await runtime.resume(first)).result == source.result


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"at_seq": 99}, "cannot fork at seq 99"),
        ({"at_seq": -1}, "cannot fork at seq -1"),
        ({"before_node": "nope"}, "has no node nope"),
        ({"at_seq": 1, "set_outputs": {ANSWER: 1}}, f"{ANSWER} not completed at seq 1"),
        ({"at_seq": 2, "set_outputs": {"ghost": 1}}, "ghost not completed at seq 2"),
        ({}, "exactly one fork point"),
        ({"at_seq": 1, "before_node": TOOL}, "exactly one fork point"),
    ],
)
async def test_bad_fork_is_refused_storing_nothing(
    durable_store: Store,
    kwargs: dict,
    message: str,  # type: ignore[type-arg]
) -> None:
    runtime = Runtime(durable_store)
    source = await runtime.start(tool_chain, 1, run_id=uid("bad"))
    before = await durable_store.runs.list()
    with pytest.raises(BadFork, match=message):
        await runtime.fork(source.run_id, **kwargs)
    assert await durable_store.runs.list() == before


async def test_fork_at_the_end_and_of_unknown_run_are_refused(durable_store: Store) -> None:
    runtime = Runtime(durable_store)
    source = await runtime.start(tool_chain, 1, run_id=uid("end"))
    last = len(await durable_store.log.read_all(source.run_id)) - 1
    with pytest.raises(BadFork, match=f"is its run_finished; fork at seq {last - 1}"):
        await runtime.fork(source.run_id, at_seq=last)
    with pytest.raises(UnknownRun):
        await runtime.fork("no-such-run", at_seq=0)
    assert [i.run_id for i in await durable_store.runs.list()] == [source.run_id]


async def test_a_rewritten_fork_of_a_log_that_does_not_replay_names_the_record(
    durable_store: Store,
) -> None:
    runtime = Runtime(durable_store)
    source = await runtime.start(tool_chain, 1, run_id=uid("misfit"))
    rows = await durable_store.log.read_all(source.run_id)
    bad = len(rows)  # the root's record again: a node recorded twice
    await durable_store.log.append(source.run_id, [(bad, rows[1])])
    before = await durable_store.runs.list()
    with pytest.raises(BadFork, match=rf"record at seq {bad} does not replay \(.*root"):
        await runtime.fork(source.run_id, at_seq=bad, set_outputs={TOOL: 21})
    assert await durable_store.runs.list() == before


async def test_history_has_one_checkpoint_per_record_naming_its_node(
    durable_store: Store,
) -> None:
    runtime = Runtime(durable_store)
    source = await runtime.start(tool_chain, 2, run_id=uid("hist"))
    fork_id = await runtime.fork(source.run_id, at_seq=2)
    steps = list(checkpoints(await records_of(durable_store, source.run_id)))
    assert [s.seq for s in steps] == list(range(len(steps)))
    assert steps[0].kind == "run_started"
    assert steps[-1].kind == "run_finished" and steps[-1].status == "succeeded"
    assert {s.node_id for s in steps if s.kind == "node_completed"} == {ROOT_ID, TOOL, ANSWER}
    head = next(checkpoints(await records_of(durable_store, fork_id)))
    assert head.note.endswith(f"forked from {source.run_id} at seq 2")


async def test_a_fork_inside_a_wait_keeps_the_wait(durable_store: Store) -> None:
    runtime = Runtime(durable_store)
    source = await runtime.start(approvals, {"n": 1}, run_id=uid("wait"))
    assert source.status is Status.WAITING
    last = len(await durable_store.log.read_all(source.run_id)) - 1
    fork_id = await runtime.fork(source.run_id, at_seq=last)
    parked = await runtime.resume(fork_id)
    assert parked.status is Status.WAITING
    assert [w.key for w in parked.graph.pending_waits()] == ["approve-0"]
    await runtime.signal(fork_id, "approve-0", {"approve": False})
    done = await runtime.resume(fork_id)
    assert (done.status, done.result) == (Status.SUCCEEDED, [[0, "rejected"]])
    # The source still waits for its own answer.
    assert (await runtime.outcome(source.run_id)).status is Status.WAITING


async def test_a_fork_keeps_the_steps_recorded_before_its_seq(durable_store: Store) -> None:
    runtime = Runtime(durable_store)
    source = await runtime.start(steps_agent, None, run_id=uid("steps"))
    records = await records_of(durable_store, source.run_id)
    steps = [seq for seq, r in enumerate(records) if r.HasField("step_recorded")]
    assert len(steps) == 3
    fork_id = await runtime.fork(source.run_id, at_seq=steps[1])  # plan and fetch recorded
    outcome = await runtime.resume(fork_id)
    assert (outcome.status, outcome.result) == (Status.SUCCEEDED, source.result)
    ran = {name: CALLS[f"{fork_id}/{name}"] for name in ("plan", "fetch", "write")}
    assert ran == {"plan": 0, "fetch": 0, "write": 1}
