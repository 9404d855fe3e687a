"""Resume reads a run's log once (issue 12, recovery): a caller that loaded the run before
taking it (`tether resume` of a paused run checks its budget first) hands the graph over,
and the resume reads only the records appended since, and nothing when there are none (its
RunResumed at the graph's next seq is refused if a record landed there). A resume that
loads the run itself reads it first and takes it while it is built (`take_loading`): what
lands between the read and the take is caught up the same way. Every backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.agents import uid
from tether import Budget, Context, Node, NodeResult, Registry, Runtime, Spawn, Status, Store
from tether.control.actions import requeue
from tether.foundation.errors import CorruptRecord
from tether.model.budgets import parse_change
from tether.model.graph import Graph
from tether.model.records import decode_log, encode, run_paused
from tether.store.base import Claim

steps = Registry("test.readonce.chain", entry="step")


@steps.node("step")
async def step(ctx: Context, node: Node) -> NodeResult:
    i, n = node.input["i"], node.input["n"]
    if i + 1 < n:
        return NodeResult(i, spawn=[Spawn("step", {"i": i + 1, "n": n}, key="next")])
    return NodeResult(i, is_result=True)


class Reads:
    """Counts the log reads a store answers: whole logs, and rows past a seq."""

    def __init__(self, store: Store) -> None:
        self.whole = 0
        self.tails: list[int] = []
        read, read_all = store.log.read, store.log.read_all

        async def counted_read(run_id: str, *, after_seq: int = -1) -> list[tuple[int, bytes]]:
            if after_seq >= 0:  # (the memory store's read_all reads from -1)
                self.tails.append(after_seq)
            return await read(run_id, after_seq=after_seq)

        async def counted_read_all(run_id: str) -> list[bytes]:
            self.whole += 1
            return await read_all(run_id)

        store.log.read = counted_read  # type: ignore[method-assign]
        store.log.read_all = counted_read_all  # type: ignore[method-assign]


@pytest.fixture
def reads(store: Store) -> Iterator[Reads]:
    yield Reads(store)


async def completed_ids(store: Store, run_id: str) -> list[str]:
    records = decode_log(run_id, await store.log.read_all(run_id))
    return [r.node_completed.node_id for r in records if r.HasField("node_completed")]


async def paused_after_one(store: Store) -> tuple[Runtime, str, Graph]:
    """A three-step chain paused by its budget after one node, and its graph as loaded."""
    rt = Runtime(store, concurrency=1)
    run_id = uid("readonce")
    await rt.start(steps, {"i": 0, "n": 3}, run_id=run_id, budget=Budget(max_nodes=1))
    return rt, run_id, await rt.load(run_id)


async def recorded_twice(store: Store) -> tuple[Runtime, str, Graph, list[bytes]]:
    """`paused_after_one`, then a record no graph accepts appended after its load (a node
    completed again) at the log's next seq; and the rows before it."""
    rt, run_id, graph = await paused_after_one(store)
    rows = await store.log.read_all(run_id)
    await store.log.append(run_id, [(len(rows), rows[1])])
    return rt, run_id, graph, rows


async def each_recorded_once(store: Store, run_id: str, nodes: int) -> bool:
    ids = await completed_ids(store, run_id)
    return len(ids) == len(set(ids)) == nodes


async def test_resume_with_a_loaded_graph_reads_only_what_was_appended_since(
    store: Store, reads: Reads
) -> None:
    rt = Runtime(store, concurrency=1)
    run_id = uid("readonce")
    paused = await rt.start(steps, {"i": 0, "n": 6}, run_id=run_id, budget=Budget(max_nodes=2))
    assert paused.status is Status.PAUSED
    stale = await rt.load(run_id)  # loaded, then the run moves on without it
    again = await rt.resume(run_id, budget=Budget(max_nodes=4))
    assert again.status is Status.PAUSED and again.graph.completed_count == 4
    whole_before, seen = reads.whole, stale.next_seq

    done = await Runtime(store).resume(run_id, budget=Budget(), graph=stale)

    assert done.status is Status.SUCCEEDED and done.result == 5
    assert done.graph is stale  # the graph handed over, brought up to date and continued
    assert reads.whole == whole_before  # the log was not read whole again ...
    assert reads.tails[-1] == seen - 1  # ... only from the seq the graph had reached
    assert await each_recorded_once(store, run_id, 6)
    fresh = await rt.load(run_id)
    assert list(fresh.order) == list(stale.order) and fresh.next_seq == stale.next_seq


async def test_resume_of_a_graph_up_to_date_reads_the_log_no_more(
    store: Store, reads: Reads
) -> None:
    rt, run_id, graph = await paused_after_one(store)
    whole = reads.whole
    done = await rt.resume(run_id, budget=Budget(), graph=graph)
    assert done.status is Status.SUCCEEDED and done.result == 2
    assert reads.whole == whole and reads.tails == []
    assert await each_recorded_once(store, run_id, 3)


async def test_a_stale_graph_that_looks_spent_is_caught_up_before_refusing(
    store: Store, reads: Reads
) -> None:
    # Loaded while paused by its budget; then given more (RunResumed with new limits,
    # queued, not executed): the graph handed over says spent, the log says not.
    rt, run_id, stale = await paused_after_one(store)
    seen = stale.next_seq
    await requeue(rt, run_id, budget=parse_change("nodes=+5"), ttl=5.0)

    done = await rt.resume(run_id, graph=stale)

    assert done.status is Status.SUCCEEDED and done.result == 2
    assert done.graph is stale and reads.tails == [seen - 1]  # caught up, then continued
    assert await each_recorded_once(store, run_id, 3)


async def test_a_record_appended_since_that_does_not_fit_is_named_by_its_seq(
    store: Store,
) -> None:
    rt, run_id, graph, rows = await recorded_twice(store)
    await store.log.append(run_id, [(len(rows) + 1, encode(run_paused("again")))])
    with pytest.raises(CorruptRecord, match=f"seq {len(rows)}"):
        await rt.catch_up(graph)


async def test_resume_refuses_the_graph_of_another_run(store: Store) -> None:
    rt = Runtime(store, concurrency=1)
    first, second = uid("readonce"), uid("readonce")
    await rt.start(steps, {"i": 0, "n": 2}, run_id=first, budget=Budget(max_nodes=1))
    await rt.start(steps, {"i": 0, "n": 2}, run_id=second, budget=Budget(max_nodes=1))
    with pytest.raises(ValueError, match=f"resume of run {second} was given the graph of {first}"):
        await rt.resume(second, budget=Budget(), graph=await rt.load(first))
    assert (await rt.load(second)).status is Status.PAUSED  # nothing recorded


async def test_invariant_4_a_record_appended_between_the_read_and_the_take_is_caught_up(
    store: Store, reads: Reads
) -> None:
    # The run is read, then (before the take) given more by someone else: its RunResumed
    # with new limits lands after what was read, under a claim of its own, released. The
    # resume's own RunResumed at that seq is refused, not written over, and the tail read.
    rt, run_id, _ = await paused_after_one(store)
    take = store.leases.take
    raced: list[int] = []

    async def take_after_a_requeue(
        run: str, owner: str, ttl: float, *, force: bool = False
    ) -> Claim | None:
        if not raced:
            raced.append((await rt.load(run)).next_seq)
            store.leases.take = take  # type: ignore[method-assign]
            await requeue(rt, run, budget=parse_change("nodes=+5"), ttl=5.0)
        return await take(run, owner, ttl, force=force)

    store.leases.take = take_after_a_requeue  # type: ignore[method-assign]
    whole = reads.whole

    done = await Runtime(store).resume(run_id)

    assert raced, "the take did not run"
    assert done.status is Status.SUCCEEDED and done.result == 2  # the requeue's limits
    # Read whole once by the resume (and twice by the race above), then only its tail.
    assert reads.whole == whole + 2 + 1 and reads.tails == [raced[0] - 1]
    assert await each_recorded_once(store, run_id, 3)


async def test_a_run_that_does_not_rebuild_after_its_take_is_given_back_paused(
    store: Store,
) -> None:
    _, run_id, graph, rows = await recorded_twice(store)
    for _ in range(2):  # given back each time: the next resume is not refused as busy
        with pytest.raises(CorruptRecord, match=f"seq {len(rows)}"):
            await Runtime(store).resume(run_id, budget=Budget())
        info = await store.runs.get(run_id)
        assert info is not None and (info.status, info.owner) == (Status.PAUSED, None)
        if store.io_beside_work:  # taken while it was built: given back, with why
            assert info.reason is not None
            assert info.reason.startswith("resume could not rebuild the run: CorruptRecord")
            assert f"seq {len(rows)}" in info.reason
        else:  # built before the take: never taken
            assert info.reason == graph.reason
    assert await store.log.read_all(run_id) == [*rows, rows[1]]  # nothing more recorded
