"""Budgets (invariant 7): each limit pauses the run exactly when the amount used reaches it.

A chain of nodes, one at a time, each using a fixed amount, shows the exact comparison:
a limit of 3 units with 1 unit per node records exactly 3 nodes (a `>` instead of `>=`
would record 4), and the reason names exactly the amount used. The wall clock is a
`ManualClock` that each node moves by a second: no sleeps, exact milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.agents import uid
from tests.clock import ManualClock
from tether import Budget, Context, Node, NodeResult, Registry, Runtime, Spawn, Status, Store, Usage
from tether.control import actions as control
from tether.foundation import clock as tether_clock
from tether.foundation.errors import BadBudget, BudgetSpent
from tether.model.budgets import parse_budget
from tether.model.records import decode_log

chain = Registry("test.budget.chain", entry="step")
CLOCKS: dict[str, ManualClock] = {}


@chain.node("step")
async def step(ctx: Context, node: Node) -> NodeResult:
    each = node.input
    ctx.add_usage(Usage(tokens_in=each["tokens"], cost=each["cost"], model_calls=each["turns"]))
    if each["seconds"]:
        CLOCKS[each["clock"]].advance(each["seconds"])
    i = each["i"]
    if i + 1 < each["n"]:
        return NodeResult(i, spawn=[Spawn("step", {**each, "i": i + 1}, key="next")])
    return NodeResult(i, is_result=True)


def each_node(
    *, tokens: int = 0, cost: float = 0.0, turns: int = 0, seconds: float = 0, n: int = 10
) -> dict[str, Any]:
    return {"i": 0, "n": n, "tokens": tokens, "cost": cost, "turns": turns, "seconds": seconds}


@pytest.fixture
def clock() -> Iterator[ManualClock]:
    manual = ManualClock()
    with tether_clock.use(manual):
        yield manual


async def recorded_nodes(store: Store, run_id: str) -> int:
    records = decode_log(run_id, await store.log.read_all(run_id))
    return sum(1 for r in records if r.HasField("node_completed"))


@pytest.mark.parametrize(
    ("limit", "nodes", "reason"),
    [
        (30, 3, "budget: token limit 30 reached (30 used)"),
        (31, 4, "budget: token limit 31 reached (40 used)"),
    ],
)
async def test_invariant_7_the_token_limit_pauses_at_exactly_the_limit(
    store: Store, limit: int, nodes: int, reason: str
) -> None:
    rt = Runtime(store, concurrency=1)
    paused = await rt.start(chain, each_node(tokens=10), budget=Budget(max_tokens=limit))
    assert paused.status is Status.PAUSED
    assert paused.reason == reason
    assert paused.graph.tokens == nodes * 10
    assert await recorded_nodes(store, paused.run_id) == nodes
    # More budget: the run goes on from there and finishes.
    done = await rt.resume(paused.run_id, budget=Budget(max_tokens=1000))
    assert done.status is Status.SUCCEEDED and done.graph.tokens == 100
    assert await recorded_nodes(store, paused.run_id) == 10


async def test_invariant_7_the_cost_limit_pauses_at_exactly_the_limit(store: Store) -> None:
    rt = Runtime(store, concurrency=1)
    paused = await rt.start(chain, each_node(cost=0.25), budget=Budget(max_cost=0.75))
    assert paused.status is Status.PAUSED
    assert paused.reason == "budget: cost limit $0.7500 reached ($0.7500 used)"
    assert paused.graph.cost == 0.75
    assert await recorded_nodes(store, paused.run_id) == 3
    done = await rt.resume(paused.run_id, budget=Budget(max_cost=1.0))
    assert done.status is Status.PAUSED
    assert done.reason == "budget: cost limit $1.0000 reached ($1.0000 used)"
    assert await recorded_nodes(store, paused.run_id) == 4


async def test_a_cost_pause_reason_and_its_refusal_print_costs_rounded(store: Store) -> None:
    # 0.1 three times is 0.30000000000000004: the reason says $0.3000, as the CLI does.
    rt = Runtime(store, concurrency=1)
    paused = await rt.start(chain, each_node(cost=0.1), budget=Budget(max_cost=0.25))
    assert paused.reason == "budget: cost limit $0.2500 reached ($0.3000 used)"
    with pytest.raises(BudgetSpent) as spent:
        await rt.resume(paused.run_id)
    assert "(cost limit $0.2500 reached ($0.3000 used))" in str(spent.value)
    assert "0.30000000000000004" not in str(spent.value)


async def test_invariant_7_the_turn_limit_pauses_at_exactly_the_limit(store: Store) -> None:
    paused = await Runtime(store, concurrency=1).start(
        chain, each_node(turns=1), budget=Budget(max_turns=3)
    )
    assert paused.status is Status.PAUSED
    assert paused.reason == "budget: turn limit 3 reached"
    assert paused.graph.model_calls == 3
    assert await recorded_nodes(store, paused.run_id) == 3


async def test_invariant_7_the_node_limit_pauses_at_exactly_the_limit(store: Store) -> None:
    paused = await Runtime(store, concurrency=1).start(
        chain, each_node(), budget=Budget(max_nodes=3)
    )
    assert paused.status is Status.PAUSED
    assert paused.reason == "budget: node limit 3 reached"
    assert paused.graph.completed_count == 3
    assert await recorded_nodes(store, paused.run_id) == 3


async def test_invariant_7_the_wall_clock_limit_counts_active_time_only(
    store: Store, clock: ManualClock
) -> None:
    key = uid("clock")
    CLOCKS[key] = clock
    rt = Runtime(store, concurrency=1)
    spec = {**each_node(seconds=1.0), "clock": key}
    paused = await rt.start(chain, spec, budget=Budget(max_wall_s=3))
    assert paused.status is Status.PAUSED
    assert paused.reason == "budget: wall-clock limit 3000 ms reached"
    assert paused.graph.wall_ms() == 3000
    assert await recorded_nodes(store, paused.run_id) == 3
    # An hour parked is not active time: the resumed session starts from 3 s used.
    clock.advance(3600)
    again = await rt.resume(paused.run_id, budget=Budget(max_wall_s=5))
    assert again.status is Status.PAUSED
    assert again.reason == "budget: wall-clock limit 5000 ms reached"
    assert again.graph.wall_ms() == 5000
    assert await recorded_nodes(store, paused.run_id) == 5
    # A reloaded graph counts the same from the log alone.
    assert (await rt.load(paused.run_id)).wall_ms() == 5000
    CLOCKS.pop(key)


async def test_no_limit_means_no_pause(store: Store) -> None:
    done = await Runtime(store, concurrency=1).start(
        chain, each_node(tokens=10, cost=0.5, turns=1, n=5), budget=Budget()
    )
    assert done.status is Status.SUCCEEDED
    assert (done.graph.tokens, done.graph.cost, done.graph.model_calls) == (50, 2.5, 5)


# -- nodes and turns in flight count against the budget ----------------------------

fan = Registry("test.budget.fan", entry="root")


@fan.node("root")
async def fan_root(ctx: Context, node: Node) -> NodeResult:
    ctx.add_usage(Usage(model_calls=node.input["turns"]))
    n, kind = node.input["width"], node.input["kind"]
    return NodeResult(None, spawn=[Spawn(kind, node.input, key=str(i)) for i in range(n)])


@fan.node("leaf")
async def fan_leaf(ctx: Context, node: Node) -> NodeResult:
    return NodeResult("leaf")


@fan.node("turn")
async def fan_turn(ctx: Context, node: Node) -> NodeResult:
    ctx.add_usage(Usage(model_calls=1))
    return NodeResult("turn")


async def test_invariant_7_nodes_in_flight_never_take_the_run_past_its_node_limit(
    store: Store,
) -> None:
    # Five leaves are ready at once and sixteen could run: only two fit in a budget of 3.
    rt = Runtime(store, concurrency=16)
    spec = {"width": 5, "kind": "leaf", "turns": 0}
    paused = await rt.start(fan, spec, budget=Budget(max_nodes=3))
    assert paused.status is Status.PAUSED
    assert paused.reason == "budget: node limit 3 reached"
    assert await recorded_nodes(store, paused.run_id) == 3
    # `nodes=+2`: two more than used so far, and exactly two more are recorded.
    graph = await rt.load(paused.run_id)
    more = parse_budget("nodes=+2", graph)
    assert more.max_nodes == 5
    again = await rt.resume(paused.run_id, budget=more)
    assert again.status is Status.PAUSED and await recorded_nodes(store, paused.run_id) == 5


async def test_invariant_7_turns_in_flight_never_take_the_run_past_its_turn_limit(
    store: Store,
) -> None:
    # The root made a model call, so its kind is known as a turn; the four parallel
    # "turn" nodes become known as turns once the first one records, and at most the
    # turns left are in flight from then on.
    rt = Runtime(store, concurrency=1)
    spec = {"width": 4, "kind": "turn", "turns": 1}
    paused = await rt.start(fan, spec, budget=Budget(max_turns=3))
    assert paused.status is Status.PAUSED
    assert paused.graph.model_calls == 3
    rt = Runtime(store, concurrency=16)
    graph = await rt.load(paused.run_id)
    again = await rt.resume(paused.run_id, budget=parse_budget("turns=+1", graph))
    assert again.status is Status.PAUSED
    assert again.reason == "budget: turn limit 4 reached"
    assert again.graph.model_calls == 4  # three "turn" nodes were ready: one fit


async def test_resuming_a_run_paused_by_its_budget_without_raising_it_is_refused(
    store: Store,
) -> None:
    rt = Runtime(store, concurrency=1)
    paused = await rt.start(chain, each_node(), budget=Budget(max_nodes=2))
    before = await store.log.read_all(paused.run_id)
    for budget in (None, Budget(max_nodes=2), Budget(max_nodes=1, max_tokens=99)):
        with pytest.raises(BudgetSpent, match=r"node limit \d reached.*--budget nodes=\+N"):
            await rt.resume(paused.run_id, budget=budget)
        # Nothing recorded, and the run is paused still, free for the next resume.
    assert await store.log.read_all(paused.run_id) == before
    info = await store.runs.get(paused.run_id)
    assert info is not None and info.status is Status.PAUSED and info.owner is None
    with pytest.raises(BudgetSpent, match=r"API: budget.max_nodes"):
        await control.requeue(rt, paused.run_id, budget=None, ttl=5)
    with pytest.raises(BudgetSpent):
        await control.requeue(rt, paused.run_id, budget={"max_nodes": (2, False)}, ttl=5)
    info = await store.runs.get(paused.run_id)
    assert info is not None and info.status is Status.PAUSED
    assert await store.log.read_all(paused.run_id) == before
    # Raised: it goes on.
    done = await rt.resume(paused.run_id, budget=Budget(max_nodes=100))
    assert done.status is Status.SUCCEEDED


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("nodes=nan", "a finite number >= 0"),
        ("cost=inf", "a finite number >= 0"),
        ("nodes=-3", "a finite number >= 0"),
        ("steps=3", "the keys are nodes, tokens, cost, wall, turns"),
        ("nodes", "the keys are nodes, tokens, cost, wall, turns"),
        ("nodes=many", "not a number"),
    ],
)
def test_a_bad_budget_spec_names_the_item(spec: str, says: str) -> None:
    with pytest.raises(BadBudget, match=says):
        parse_budget(spec)


def test_plus_n_on_a_new_run_is_n() -> None:
    assert parse_budget("nodes=+2,cost=+0.5,wall=60") == Budget(
        max_nodes=2, max_cost=0.5, max_wall_s=60
    )
