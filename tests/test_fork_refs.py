"""Cheap forks (issue 13): a fork references its source's records instead of copying them,
reads like a copy on every backend, and stays readable when its source is deleted."""

from __future__ import annotations

import pytest

from tests.agents import uid
from tests.test_fork import ANSWER, TOOL, tool_chain
from tether import BadFork, Budget, Context, Node, NodeResult, Registry, Runtime, Spawn, Status
from tether.model.budgets import parse_change
from tether.model.records import decode_log
from tether.ops.retention import delete_run, prune
from tether.store import Store
from tether.store.forks import Copy, Origin, Segment, plan_copies, plan_segments

chain = Registry("test.fork.chain", entry="step")


@chain.node("step")
async def step(ctx: Context, node: Node) -> NodeResult:
    i, n = node.input["i"], node.input["n"]
    if i + 1 >= n:
        return NodeResult(i, is_result=True)
    return NodeResult(i, spawn=[Spawn("step", {"i": i + 1, "n": n}, key="next")])


async def own_rows(store: Store, run_id: str) -> int:
    return (await store.retention.log_size([run_id])).rows


def test_plan_segments_covers_the_prefix_from_the_runs_that_hold_it() -> None:
    assert plan_segments("s", [], 0) == []
    assert plan_segments("s", [], 5) == [Segment(1, 5, "s")]
    assert plan_segments("s", [], 5, own=[1, 3]) == [Segment(2, 2, "s"), Segment(4, 5, "s")]
    # A fork of a fork: what the source references comes from the run holding it.
    source = [Segment(1, 3, "a"), Segment(5, 9, "b")]
    assert plan_segments("s", source, 7) == [
        Segment(1, 3, "a"),
        Segment(4, 4, "s"),
        Segment(5, 7, "b"),
    ]
    assert plan_segments("s", source, 12, own=[5]) == [
        Segment(1, 3, "a"),
        Segment(4, 4, "s"),
        Segment(6, 9, "b"),
        Segment(10, 12, "s"),
    ]


def test_plan_copies_moves_at_most_the_limit_whole_references_first() -> None:
    refs = [("f", 1, 3, "s"), ("f", 5, 9, "s"), ("g", 1, 2, "s")]
    assert plan_copies(refs, 5) == [Copy("f", 1, 3, "s", None), Copy("f", 5, 6, "s", 7)]
    assert plan_copies(refs, 100)[-1] == Copy("g", 1, 2, "s", None)
    assert plan_copies([], 5) == []


async def test_invariant_9_a_fork_references_its_prefix_and_reads_like_a_copy(
    store: Store,
) -> None:
    runtime = Runtime(store)
    source = await runtime.start(chain, {"i": 0, "n": 40}, run_id=uid("long"))
    assert source.status is Status.SUCCEEDED
    src = await store.log.read_all(source.run_id)
    fork_id = await runtime.fork(source.run_id, at_seq=30)
    assert await own_rows(store, fork_id) == 1  # its seq 0; seqs 1..30 are references
    rows = await store.log.read_all(fork_id)
    assert len(rows) == 31 and rows[1:] == src[1:31]
    # Reads after a seq see the references too (event streams tail that way).
    for after in (-1, 0, 12, 29, 30):
        tail = await store.log.read(fork_id, after_seq=after)
        assert [r for _, r in tail] == rows[after + 1 :]
        assert [seq for seq, _ in tail] == list(range(after + 1, 31))
    assert await store.forks.origins([fork_id, source.run_id]) == {
        fork_id: Origin(source.run_id, 30)
    }
    outcome = await runtime.resume(fork_id)
    assert (outcome.status, outcome.result) == (Status.SUCCEEDED, source.result)
    assert await store.log.read_all(fork_id) != src  # its own seq 0 and resume record
    assert await own_rows(store, fork_id) == 1 + len(src) - 31 + 1  # + RunResumed


async def test_overrides_and_new_limits_are_the_forks_own_rows(store: Store) -> None:
    runtime = Runtime(store)
    source = await runtime.start(tool_chain, 5, run_id=uid("own"))
    fork_id = await runtime.fork(
        source.run_id, before_node=ANSWER, set_outputs={TOOL: 21}, budget=Budget(max_nodes=9)
    )
    assert await own_rows(store, fork_id) == 3  # seq 0, the overridden record, RunResumed
    outcome = await runtime.resume(fork_id)
    assert (outcome.status, outcome.result) == (Status.SUCCEEDED, "the answer is 21")


async def test_a_fork_of_a_fork_references_the_runs_that_hold_each_record(
    store: Store,
) -> None:
    runtime = Runtime(store)
    source = await runtime.start(chain, {"i": 0, "n": 30}, run_id=uid("deep"))
    first = await runtime.fork(source.run_id, at_seq=10)
    assert (await runtime.resume(first)).result == source.result
    second = await runtime.fork(first, at_seq=20)
    # Seq 11 of the first fork is its RunResumed; 12.. its own nodes.
    assert await store.forks.segments(second) == [
        Segment(1, 10, source.run_id),
        Segment(11, 20, first),
    ]
    assert (await store.log.read_all(second))[1:] == (await store.log.read_all(first))[1:21]
    assert (await runtime.resume(second)).result == source.result


@pytest.mark.parametrize("how", ["delete", "prune"])
async def test_deleting_a_source_copies_what_its_forks_reference(store: Store, how: str) -> None:
    runtime = Runtime(store)
    source = await runtime.start(chain, {"i": 0, "n": 30}, run_id=uid("gone"))
    first = await runtime.fork(source.run_id, at_seq=25)
    second = await runtime.fork(first, at_seq=12, set_inputs={})
    before = {f: await store.log.read_all(f) for f in (first, second)}
    assert await store.forks.forks_of(source.run_id) == sorted([first, second])
    if how == "delete":
        report = await delete_run(store, source.run_id, batch_rows=7)  # copies in batches
        assert report.runs == 1
    else:
        report = await prune(store, older_than=1, now=10**10, batch_rows=7)
        assert source.run_id in report.run_ids and first not in report.run_ids  # queued
    assert await store.runs.get(source.run_id) is None
    assert await store.forks.forks_of(source.run_id) == []
    for fork_id, rows in before.items():
        assert await store.log.read_all(fork_id) == rows
        assert all(s.source_run_id != source.run_id for s in await store.forks.segments(fork_id))
        outcome = await runtime.resume(fork_id)
        assert (outcome.status, outcome.result) == (Status.SUCCEEDED, source.result)
    # The lineage names the source still.
    assert (await store.forks.origins([first]))[first] == Origin(source.run_id, 25)


async def test_deleting_a_fork_keeps_its_source_and_the_forks_of_the_fork(store: Store) -> None:
    runtime = Runtime(store)
    source = await runtime.start(chain, {"i": 0, "n": 12}, run_id=uid("mid"))
    first = await runtime.fork(source.run_id, at_seq=5)
    await runtime.resume(first)
    second = await runtime.fork(first, at_seq=9)
    rows = await store.log.read_all(second)
    await delete_run(store, first)
    assert await store.log.read_all(second) == rows
    assert await store.forks.origins([first]) == {}
    assert (await runtime.resume(second)).result == source.result
    assert await store.forks.forks_of(source.run_id) == [second]


async def test_an_input_of_a_pending_node_can_be_set(store: Store) -> None:
    runtime = Runtime(store)
    source = await runtime.start(tool_chain, 5, run_id=uid("input"))
    fork_id = await runtime.fork(source.run_id, before_node=TOOL, set_inputs={TOOL: 50})
    head = decode_log(fork_id, (await store.log.read_all(fork_id))[:1])[0].run_started
    assert list(head.overridden_node_ids) == [TOOL]
    assert await own_rows(store, fork_id) == 2  # seq 0 and the record that spawned the tool
    outcome = await runtime.resume(fork_id)
    assert (outcome.status, outcome.result) == (Status.SUCCEEDED, "the answer is 100")
    assert (await runtime.outcome(source.run_id)).result == "the answer is 10"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"before_node": ANSWER, "set_inputs": {TOOL: 1}}, f"{TOOL} already recorded at seq"),
        ({"at_seq": 1, "set_inputs": {"ghost": 1}}, "ghost not pending at seq 1"),
        ({"at_seq": 0, "set_inputs": {TOOL: 1}}, f"{TOOL} not pending at seq 0"),
        (
            {"at_seq": 1, "set_inputs": {TOOL: 1}, "set_outputs": {TOOL: 2}},
            "an output or an input, not both",
        ),
    ],
)
async def test_a_bad_input_override_is_refused_storing_nothing(
    store: Store,
    kwargs: dict,  # type: ignore[type-arg]
    message: str,
) -> None:
    runtime = Runtime(store)
    source = await runtime.start(tool_chain, 1, run_id=uid("badin"))
    before = await store.runs.list()
    with pytest.raises(BadFork, match=message):
        await runtime.fork(source.run_id, **kwargs)
    assert await store.runs.list() == before


async def test_a_relative_budget_counts_from_the_fork_points_usage(store: Store) -> None:
    runtime = Runtime(store)
    source = await runtime.start(chain, {"i": 0, "n": 30}, run_id=uid("rel"))
    then = await runtime.load(source.run_id, at_seq=5)
    fork_id = await runtime.fork(source.run_id, at_seq=5, budget=parse_change("nodes=+2"))
    assert (await runtime.load(fork_id)).limits.max_nodes == then.completed_count + 2
    outcome = await runtime.resume(fork_id)
    assert outcome.status == Status.PAUSED
    assert (await runtime.load(fork_id)).completed_count == then.completed_count + 2
