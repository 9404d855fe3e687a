"""The executor on real stores: scheduling, failures, budgets, drain, invariants 1, 3, 6, 7, 8."""

from __future__ import annotations

import asyncio
import dataclasses
from collections import Counter
from typing import Any

import pytest

from tests.agents import EXECUTIONS, MAX_IN_FLIGHT, fanout, uid
from tests.test_subagents import parent
from tether import (
    Budget,
    Context,
    CorruptRecord,
    Node,
    NodeResult,
    Registry,
    Retry,
    Runtime,
    Spawn,
    Status,
    Store,
    UnknownRun,
)
from tether.foundation.core import make_node
from tether.foundation.errors import CannotContinue
from tether.model.records import decode_log
from tether.store.base import LogStore


async def node_records(store: Store, run_id: str) -> list[Any]:
    rows = await store.log.read_all(run_id)
    return [r.node_completed for r in decode_log(run_id, rows) if r.HasField("node_completed")]


async def bodies(store: Store, run_id: str) -> list[str]:
    rows = await store.log.read_all(run_id)
    return [str(r.WhichOneof("body")) for r in decode_log(run_id, rows)]


async def test_fan_out_and_join_records_every_node_once(store: Store) -> None:
    outcome = await Runtime(store).start(fanout, {"width": 5})
    assert outcome.status is Status.SUCCEEDED
    assert outcome.result == sum(i * i for i in range(5))
    done = await node_records(store, outcome.run_id)
    assert len(done) == 7
    assert len({nc.node_id for nc in done}) == 7
    join = next(nc for nc in done if nc.kind == "join")
    assert len(outcome.graph.parents_of(join.node_id)) == 5  # a slim record: the spec's
    assert outcome.graph.tokens == 5 * 15
    assert (await store.runs.get(outcome.run_id)).status is Status.SUCCEEDED  # type: ignore[union-attr]


async def test_independent_nodes_overlap(store: Store) -> None:
    # 20 nodes that each wait on I/O are all in flight at once (counted, not timed).
    outcome = await Runtime(store).start(fanout, {"width": 20, "delay": 0.05})
    assert outcome.status is Status.SUCCEEDED
    assert MAX_IN_FLIGHT[outcome.run_id] == 20
    # The concurrency limit holds too.
    limited = await Runtime(store, concurrency=4).start(fanout, {"width": 20, "delay": 0.01})
    assert MAX_IN_FLIGHT[limited.run_id] == 4


async def test_invariant_3_node_ids_are_stable_across_runs(store: Store) -> None:
    rt = Runtime(store)
    a = await rt.start(fanout, {"width": 4, "delay": 0.001})
    b = await rt.start(fanout, {"width": 4})
    ids_a = sorted(nc.node_id for nc in await node_records(store, a.run_id))
    ids_b = sorted(nc.node_id for nc in await node_records(store, b.run_id))
    assert ids_a == ids_b


# Every method of the log interface reads it, except these two.
LOG_WRITES = {"append", "listener"}


async def test_invariant_6_the_hot_path_never_reads_the_log(store: Store) -> None:
    reads: Counter[str] = Counter()
    names = [
        name
        for name, member in vars(LogStore).items()
        if callable(member) and not name.startswith("_") and name not in LOG_WRITES
    ]
    assert {"read", "read_all"} <= set(names)
    log = store.log
    originals = {name: getattr(log, name) for name in names}

    def counting(name: str) -> Any:
        async def count(*args: Any, **kwargs: Any) -> Any:
            reads[name] += 1
            return await originals[name](*args, **kwargs)

        return count

    for name in names:
        setattr(log, name, counting(name))
    try:
        outcome = await Runtime(store).start(fanout, {"width": 8})
        # A sub-agent run started by a node is created and executed from memory too.
        with_child = await Runtime(store).start(parent, {"n": 3})
        hot_path = Counter(reads)
        # The wrappers do count: waking a run that is not resident reads its log.
        await Runtime(store).load(outcome.run_id)
        assert reads["read_all"] == hot_path["read_all"] + 1
    finally:
        for name in names:
            delattr(log, name)
    assert outcome.status is Status.SUCCEEDED and with_child.status is Status.SUCCEEDED
    assert hot_path == Counter(), f"the hot path read the log: {dict(hot_path)}"


# -- failures ------------------------------------------------------------------------

flaky = Registry("test.flaky", entry="root")
ATTEMPTS: dict[str, int] = {}


@flaky.node("root")
async def flaky_root(ctx: Context, node: Node) -> NodeResult:
    return NodeResult(None, spawn=[Spawn(k, node.input, key=k) for k in node.input["kinds"]])


@flaky.node("sometimes", retry=Retry(attempts=3, backoff=0.001))
async def sometimes(ctx: Context, node: Node) -> str:
    ATTEMPTS[ctx.idempotency_key] = ctx.attempt
    if ctx.attempt < 3:
        raise ConnectionError(f"attempt {ctx.attempt} lost its connection")
    return "third time lucky"


@flaky.node("always", retry=Retry(attempts=2, backoff=0.001))
async def always(ctx: Context, node: Node) -> str:
    raise RuntimeError("the tool is broken")


async def _fallback(ctx: Context, node: Node, exc: BaseException) -> str:
    return f"fallback after {type(exc).__name__}"


@flaky.node("rescued", retry=Retry(attempts=2, backoff=0.001), fallback=_fallback)
async def rescued(ctx: Context, node: Node) -> str:
    raise RuntimeError("primary path down")


@flaky.node("hangs", timeout=0.05)
async def hangs(ctx: Context, node: Node) -> str:
    await asyncio.sleep(3600)
    return "never"


@flaky.node("unencodable", retry=Retry(attempts=3, backoff=0.001))
async def unencodable(ctx: Context, node: Node) -> object:
    ATTEMPTS[ctx.idempotency_key] = ctx.attempt
    return {"not json": object()}


@flaky.node("circular")
async def circular(ctx: Context, node: Node) -> object:
    out: dict[str, object] = {"text": "a value that holds itself"}
    out["self"] = out
    return out


@flaky.node("huge")
async def huge(ctx: Context, node: Node) -> str:
    return "x" * 100_000


@flaky.node("badspawn")
async def badspawn(ctx: Context, node: Node) -> NodeResult:
    return NodeResult(None, spawn=[Spawn("huge", key="a"), Spawn("huge", key="a")])


@flaky.node("badjoin")
async def badjoin(ctx: Context, node: Node) -> NodeResult:
    return NodeResult(None, spawn=[Spawn("huge", key="j", after=["missing"])])


async def test_retries_until_an_attempt_succeeds(store: Store) -> None:
    outcome = await Runtime(store).start(flaky, {"kinds": ["sometimes"]})
    assert outcome.status is Status.SUCCEEDED
    done = {nc.kind: nc for nc in await node_records(store, outcome.run_id)}
    assert done["sometimes"].attempt == 3
    assert "node_failed" not in await bodies(store, outcome.run_id)


async def test_last_failed_attempt_records_node_failed_and_fails_the_run(store: Store) -> None:
    rt = Runtime(store)
    outcome = await rt.start(flaky, {"kinds": ["always"]})
    assert outcome.status is Status.FAILED
    assert "failed after 2 attempt(s): RuntimeError: the tool is broken" in outcome.reason
    assert await bodies(store, outcome.run_id) == [
        "run_started",
        "node_completed",
        "node_failed",
        "run_finished",
    ]
    # The runtime stays up and the recorded root is still there.
    again = await rt.start(flaky, {"kinds": ["sometimes"]})
    assert again.status is Status.SUCCEEDED
    assert len(await node_records(store, outcome.run_id)) == 1


async def test_fallback_runs_after_the_last_attempt(store: Store) -> None:
    outcome = await Runtime(store).start(flaky, {"kinds": ["rescued"]})
    assert outcome.status is Status.SUCCEEDED
    done = {nc.kind: nc for nc in await node_records(store, outcome.run_id)}
    assert done["rescued"].fallback
    assert b"fallback after RuntimeError" in done["rescued"].output.json
    assert "node_failed" in await bodies(store, outcome.run_id)


async def test_a_hanging_handler_times_out(store: Store) -> None:
    outcome = await Runtime(store).start(flaky, {"kinds": ["hangs"]})
    assert outcome.status is Status.FAILED
    assert "NodeTimeout: handler for 'hangs' timed out after 0.05s" in outcome.reason


async def test_an_unknown_node_kind_gives_the_run_back_clearly(store: Store) -> None:
    """Invariant 10: a spawned kind without a handler is not the run's failure."""
    with pytest.raises(CannotContinue) as stopped:
        await Runtime(store).start(flaky, {"kinds": ["nosuchkind"]})
    assert "agent 'test.flaky' here has no handler for node kind 'nosuchkind'" in str(stopped.value)
    info = await store.runs.get(stopped.value.run_id)
    assert info is not None and info.status is Status.QUEUED and info.owner is None
    assert "waiting for a worker that can continue it" in (info.reason or "")


async def test_an_unencodable_output_fails_without_retrying(store: Store) -> None:
    outcome = await Runtime(store).start(flaky, {"kinds": ["unencodable"]})
    assert outcome.status is Status.FAILED
    assert "OutputNotSerializable" in outcome.reason
    assert list(ATTEMPTS.values())[-1] == 1


def test_the_executors_node_constructor_builds_what_node_builds() -> None:
    """`make_node` sets the slots directly: it must set every field `Node` has, in order."""
    values = ("run.a.0", "kind", ("run.a",), {"in": [1]}, 3)
    assert [f.name for f in dataclasses.fields(Node)] == [
        "node_id",
        "kind",
        "parent_ids",
        "input",
        "attempt",
    ]
    made = make_node(*values)
    assert made == Node(*values)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.attempt = 4  # type: ignore[misc]


async def test_a_circular_output_fails_the_node_and_says_why(store: Store) -> None:
    """The shared JSON encoder does not track containers: a cycle is still refused by name."""
    outcome = await Runtime(store).start(flaky, {"kinds": ["circular"]})
    assert outcome.status is Status.FAILED
    assert "OutputNotSerializable" in outcome.reason
    assert "circular reference" in outcome.reason.lower()


async def test_a_record_over_the_cap_is_refused_with_advice(store: Store) -> None:
    outcome = await Runtime(store, record_cap=16 * 1024).start(flaky, {"kinds": ["huge"]})
    assert outcome.status is Status.FAILED
    assert "RecordTooLarge" in outcome.reason
    assert "keep bytes in a blob" in outcome.reason


@pytest.mark.parametrize(
    ("kind", "message"),
    [("badspawn", "same key"), ("badjoin", "joins on unknown keys ['missing']")],
)
async def test_invalid_spawns_fail_the_node(store: Store, kind: str, message: str) -> None:
    outcome = await Runtime(store).start(flaky, {"kinds": [kind]})
    assert outcome.status is Status.FAILED
    assert "InvalidSpawn" in outcome.reason
    assert message in outcome.reason


async def test_unknown_run_ids_are_reported(store: Store) -> None:
    with pytest.raises(UnknownRun, match="unknown run 'nope'"):
        await Runtime(store).resume("nope")


# -- budgets (invariant 7) -------------------------------------------------------------


async def test_invariant_7_budget_pauses_between_nodes_and_resumes_with_more(
    store: Store,
) -> None:
    rt = Runtime(store)
    outcome = await rt.start(fanout, {"width": 6}, budget=Budget(max_nodes=3))
    assert outcome.status is Status.PAUSED
    assert outcome.reason == "budget: node limit 3 reached"
    recorded = len(await node_records(store, outcome.run_id))
    # Nodes in flight count against the limit: of the 6 workers ready at once, only the 2
    # that fit were launched (never more than 3 recorded); the join never started.
    assert recorded == 3
    assert "join" not in {nc.kind for nc in await node_records(store, outcome.run_id)}
    assert (await store.runs.get(outcome.run_id)).status is Status.PAUSED  # type: ignore[union-attr]

    done = await rt.resume(outcome.run_id, budget=Budget(max_nodes=100))
    assert done.status is Status.SUCCEEDED
    assert done.result == sum(i * i for i in range(6))
    ids = [nc.node_id for nc in await node_records(store, outcome.run_id)]
    assert len(ids) == len(set(ids)) == 8


async def test_token_budget_pauses_the_run(store: Store) -> None:
    outcome = await Runtime(store, concurrency=1).start(
        fanout, {"width": 6}, budget=Budget(max_tokens=30)
    )
    assert outcome.status is Status.PAUSED
    # One worker at a time, 15 tokens each: exactly two ran (the start uses none).
    assert outcome.reason == "budget: token limit 30 reached (30 used)"
    assert len(await node_records(store, outcome.run_id)) == 3


# -- drain and crashes (invariants 1 and 8) -----------------------------------------------

slow = Registry("test.slow", entry="root")
RELEASE: dict[str, asyncio.Event] = {}
STARTED: dict[str, asyncio.Event] = {}


@slow.node("root")
async def slow_root(ctx: Context, node: Node) -> NodeResult:
    n = node.input["width"]
    return NodeResult(
        None,
        spawn=[Spawn("leaf", {"i": i}, key=str(i)) for i in range(n)]
        + [Spawn("leaf", {"i": -1}, key="end", after=[str(i) for i in range(n)])],
    )


@slow.node("leaf")
async def slow_leaf(ctx: Context, node: Node) -> NodeResult:
    EXECUTIONS[ctx.idempotency_key] += 1
    STARTED.setdefault(ctx.run_id, asyncio.Event()).set()
    gate = RELEASE.setdefault(ctx.run_id, asyncio.Event())
    await gate.wait()
    return NodeResult(node.input["i"], is_result=node.input["i"] == -1)


async def test_drain_lets_in_flight_nodes_finish_and_pauses(store: Store) -> None:
    drain_1 = uid("drain")
    rt = Runtime(store, concurrency=2)
    task = asyncio.create_task(rt.start(slow, {"width": 5}, run_id=drain_1))
    await STARTED.setdefault(drain_1, asyncio.Event()).wait()
    rt.drain()
    RELEASE.setdefault(drain_1, asyncio.Event()).set()
    outcome = await task
    assert outcome.status is Status.PAUSED
    assert outcome.reason == "drain"
    leaves = [nc for nc in await node_records(store, drain_1) if nc.kind == "leaf"]
    assert len(leaves) == 2  # the two in flight finished and were recorded; nothing new started

    resumed = await Runtime(store).resume(drain_1)
    assert resumed.status is Status.SUCCEEDED
    assert resumed.result == -1
    for key, count in EXECUTIONS.items():
        if key.startswith(f"{drain_1}:"):
            assert count == 1, key


async def test_drain_grace_over_cancels_unrecorded_nodes_which_run_again(store: Store) -> None:
    drain_2 = uid("drain")
    rt = Runtime(store, concurrency=3, grace=0.01)
    task = asyncio.create_task(rt.start(slow, {"width": 3}, run_id=drain_2))
    await STARTED.setdefault(drain_2, asyncio.Event()).wait()
    rt.drain()
    outcome = await task
    assert outcome.status is Status.PAUSED
    assert [nc.kind for nc in await node_records(store, drain_2)] == ["root"]
    RELEASE.setdefault(drain_2, asyncio.Event()).set()
    resumed = await Runtime(store).resume(drain_2)
    assert resumed.status is Status.SUCCEEDED
    # The cancelled leaves ran twice (at-least-once execution), but each is recorded once.
    leaves = [nc.node_id for nc in await node_records(store, drain_2) if nc.kind == "leaf"]
    assert len(leaves) == len(set(leaves)) == 4
    assert sorted(c for k, c in EXECUTIONS.items() if k.startswith(f"{drain_2}:")) == [1, 2, 2, 2]


async def test_invariant_1_only_a_recorded_node_is_done(store: Store) -> None:
    """A crash before a node's append means it runs again; after it, never."""
    crash_1 = uid("crash")
    rt = Runtime(store, concurrency=2)
    task = asyncio.create_task(rt.start(slow, {"width": 4}, run_id=crash_1))
    await STARTED.setdefault(crash_1, asyncio.Event()).wait()
    task.cancel()  # as abrupt as it gets in-process: no drain, no pause record
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await bodies(store, crash_1) == ["run_started", "node_completed"]
    RELEASE.setdefault(crash_1, asyncio.Event()).set()
    outcome = await Runtime(store).resume(crash_1)
    assert outcome.status is Status.SUCCEEDED
    records = await node_records(store, crash_1)
    assert len(records) == len({nc.node_id for nc in records}) == 6


KEYS: list[tuple[str, int]] = []
keyed = Registry("test.keyed", entry="effect")


@keyed.node("effect", retry=Retry(attempts=2, backoff=0.001))
async def effect(ctx: Context, node: Node) -> str:
    KEYS.append((ctx.idempotency_key, ctx.attempt))
    if ctx.attempt == 1:
        raise ConnectionError("flaky")
    return ctx.idempotency_key


async def test_invariant_8_side_effects_get_a_stable_idempotency_key(store: Store) -> None:
    keyed_1 = uid("keyed")
    outcome = await Runtime(store).start(keyed, None, run_id=keyed_1)
    assert outcome.result is None  # not marked as result
    assert KEYS[-2:] == [(f"{keyed_1}:root", 1), (f"{keyed_1}:root", 2)]


async def test_a_corrupt_record_stops_rehydration_naming_run_and_seq(store: Store) -> None:
    rt = Runtime(store)
    outcome = await rt.start(fanout, {"width": 2}, budget=Budget(max_nodes=1))
    assert outcome.status is Status.PAUSED
    seq = outcome.graph.next_seq
    await store.log.append(outcome.run_id, [(seq, b"\x0a\x03garbage")])
    with pytest.raises(CorruptRecord, match=rf"run {outcome.run_id}: record at seq {seq} "):
        await Runtime(store).resume(outcome.run_id, budget=Budget(max_nodes=100))
    # Nothing already recorded is lost: every earlier row is still there and decodes.
    rows = await store.log.read_all(outcome.run_id)
    assert len(rows) == seq + 1
    assert len(decode_log(outcome.run_id, rows[:-1])) == seq


async def test_a_record_that_does_not_fit_the_graph_is_reported(store: Store) -> None:
    outcome = await Runtime(store).start(fanout, {"width": 1})
    rows = await store.log.read_all(outcome.run_id)
    # Replaying the root's record a second time (a duplicate node) must not be applied silently.
    await store.log.append(outcome.run_id, [(len(rows), rows[1])])
    with pytest.raises(CorruptRecord, match=r"records node root a second time"):
        await Runtime(store).load(outcome.run_id)


chain = Registry("test.chain", entry="step")


@chain.node("step")
async def chain_step(ctx: Context, node: Node) -> NodeResult:
    i = (node.input or {}).get("i", 0)
    if i + 1 == (await ctx.run_input())["n"]:
        return NodeResult("done", is_result=True)
    # Each node adds a 400-character message: its delta, never the history before it.
    return NodeResult("m" * 400, spawn=[Spawn("step", {"i": i + 1})])


async def test_invariant_2_records_hold_the_delta_and_stay_small(store: Store) -> None:
    outcome = await Runtime(store).start(chain, {"n": 300})
    assert outcome.status is Status.SUCCEEDED
    rows = await store.log.read_all(outcome.run_id)
    node_rows = [len(r) for r in rows[1:-1]]
    assert len(node_rows) == 300
    assert max(node_rows) < 1024  # the target: a record under 1 KiB
    # Flat, not growing with depth: ids are fixed-size hashes and no history is carried.
    # (A few bytes vary with the varint sizes of timings.)
    middle = node_rows[1:-1]
    assert max(middle) - min(middle) <= 32
    assert sum(middle[-50:]) / 50 <= sum(middle[:50]) / 50 + 8
    # Nothing stored twice: a node's parents are its spec's, in the record that spawned it
    # (a chain's step names none there either: its one parent is the node spawning it), its
    # time is its finish, and attempt 1 is not written.
    nodes = [r for r in decode_log(outcome.run_id, rows) if r.HasField("node_completed")]
    assert len(nodes) == 300
    for record in nodes:
        nc = record.node_completed
        assert record.at_us == 0 and nc.finished_at_us > 0
        assert not nc.parent_ids and nc.attempt == 0
        assert all(not spec.parent_ids for spec in nc.spawned)
