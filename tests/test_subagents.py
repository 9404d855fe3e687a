"""Sub-agents: a node runs a child run with its own log; resuming the parent resumes the child."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from tests.agents import EXECUTIONS, uid
from tether import Context, Node, NodeResult, Registry, Runtime, Spawn, Status, Store
from tether.foundation.errors import StaleEpoch
from tether.foundation.ids import child_run_id
from tether.model.records import decode_log

parent = Registry("test.parent", entry="plan")
child = Registry("test.child", entry="step")
GATE: dict[str, asyncio.Event] = {}
REACHED: dict[str, asyncio.Event] = {}


@parent.node("plan")
async def plan(ctx: Context, node: Node) -> NodeResult:
    return NodeResult("planned", spawn=[Spawn("delegate", node.input, key="d")])


@parent.node("delegate")
async def delegate(ctx: Context, node: Node) -> NodeResult:
    EXECUTIONS[ctx.idempotency_key] += 1
    answer = await ctx.run_child(child, {"n": node.input["n"], "gate": node.input.get("gate")})
    hold = node.input.get("hold")
    if hold and EXECUTIONS[ctx.idempotency_key] == 1:
        # The child has finished; the parent "dies" before its node is recorded.
        REACHED.setdefault(hold, asyncio.Event()).set()
        await asyncio.Event().wait()
    return NodeResult({"child said": answer}, is_result=True)


@child.node("step")
async def step(ctx: Context, node: Node) -> NodeResult:
    EXECUTIONS[ctx.idempotency_key] += 1
    i = node.input.get("i", 0)
    gate = node.input["gate"]
    if gate and i == 2:
        REACHED.setdefault(gate, asyncio.Event()).set()
        await GATE.setdefault(gate, asyncio.Event()).wait()
    if i + 1 < node.input["n"]:
        nxt = {"i": i + 1, "n": node.input["n"], "gate": gate}
        return NodeResult(i, spawn=[Spawn("step", nxt, key="next")])
    return NodeResult(f"{i + 1} steps", is_result=True)


async def test_a_child_run_is_logged_separately_with_a_derived_id(store: Store) -> None:
    p1 = uid("p1")
    outcome = await Runtime(store).start(parent, {"n": 3}, run_id=p1)
    assert outcome.status is Status.SUCCEEDED
    assert outcome.result == {"child said": "3 steps"}
    delegate_id = next(n for n, s in outcome.graph.nodes.items() if s.spec.kind == "delegate")
    child_id = child_run_id(p1, delegate_id)
    info = await store.runs.get(child_id)
    assert info is not None and info.parent_run_id == p1 and info.status is Status.SUCCEEDED
    records = decode_log(child_id, await store.log.read_all(child_id))
    assert records[0].run_started.parent_run_id == p1
    assert records[0].run_started.parent_node_id == delegate_id


async def test_resuming_the_parent_resumes_the_child_without_redoing_its_nodes(
    store: Store,
) -> None:
    p2 = uid("p2")
    g1 = uid("g1")
    rt = Runtime(store)
    task = asyncio.create_task(rt.start(parent, {"n": 5, "gate": g1}, run_id=p2))
    await REACHED.setdefault(g1, asyncio.Event()).wait()
    task.cancel()  # the process "dies" while the child is at its third step
    with pytest.raises(asyncio.CancelledError):
        await task
    GATE.setdefault(g1, asyncio.Event()).set()

    outcome = await Runtime(store).resume(p2)
    assert outcome.status is Status.SUCCEEDED
    assert outcome.result == {"child said": "5 steps"}
    child_keys = {k: c for k, c in EXECUTIONS.items() if k.startswith(f"{p2}.")}
    assert len(child_keys) == 5
    # Steps 0 and 1 were recorded before the crash and never ran again; step 2 was in flight.
    assert sorted(child_keys.values()) == [1, 1, 1, 1, 2]
    assert EXECUTIONS[f"{p2}:{outcome.graph.order[1]}"] == 2  # the delegate node re-ran once


async def test_a_drained_child_pauses_its_parent(store: Store) -> None:
    p3 = uid("p3")
    g2 = uid("g2")
    rt = Runtime(store)
    task = asyncio.create_task(rt.start(parent, {"n": 4, "gate": g2}, run_id=p3))
    await REACHED.setdefault(g2, asyncio.Event()).wait()
    rt.drain()
    GATE.setdefault(g2, asyncio.Event()).set()
    outcome = await task
    assert outcome.status is Status.PAUSED
    # Paused for the drain itself (not for its child), so a worker may take it up at once.
    assert outcome.reason == "drain"
    child = (await store.runs.list(status=Status.PAUSED))[0]
    assert child.parent_run_id == p3 and child.reason == "drain"
    done = await Runtime(store).resume(p3)
    assert done.status is Status.SUCCEEDED
    assert done.result == {"child said": "4 steps"}


@pytest.mark.parametrize("owned", [False, True], ids=["in_process", "worker_epoch"])
async def test_a_child_row_left_running_by_a_crash_after_the_child_finished_is_settled(
    store: Store, owned: bool
) -> None:
    """Runtime._settle_child_row: the chaos test's child-row bug.

    A crash after a child's RunFinished was appended and before its row was updated
    left the row `running` for good: the resumed parent read the child's result back
    from its log and never looked at the row again.
    """
    p = uid("p4")
    hold = uid("h")
    task = asyncio.create_task(Runtime(store).start(parent, {"n": 2, "hold": hold}, run_id=p))
    await REACHED.setdefault(hold, asyncio.Event()).wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    child_id = next(r.run_id for r in await store.runs.list() if r.parent_run_id == p)
    # The state that crash leaves: the child's log ends with RunFinished, its row does not.
    await store.runs.set_status(child_id, Status.RUNNING)

    epoch = None
    if owned:
        await store.runs.set_status(p, Status.PAUSED, reason="drain")
        claim = await store.leases.take(p, "w2", 30)
        assert claim is not None
        epoch = claim.epoch
    outcome = await Runtime(store).resume(p, epoch=epoch)
    assert outcome.status is Status.SUCCEEDED
    assert outcome.result == {"child said": "2 steps"}
    info = await store.runs.get(child_id)
    assert info is not None and info.status is Status.SUCCEEDED
    child_keys = [c for k, c in EXECUTIONS.items() if k.startswith(f"{child_id}:")]
    assert child_keys == [1, 1]  # the child's nodes never ran again
    if owned:
        # Settled at a child epoch of its own: the parent's old epoch is fenced off there.
        assert info.epoch > 0
        with pytest.raises(StaleEpoch):
            await store.leases.adopt_child(child_id, "w1", p, epoch - 1)


# -- fencing and keys of sub-agent runs ------------------------------------------------

guarded = Registry("test.parent.guarded", entry="delegate")
# Called by `delegate` just before it starts its child: the test's hook, by parent run id.
BEFORE_CHILD: dict[str, Callable[[], Awaitable[None]]] = {}


@guarded.node("delegate")
async def guarded_delegate(ctx: Context, node: Node) -> NodeResult:
    await BEFORE_CHILD[ctx.run_id]()
    answer = await ctx.run_child(child, {"n": node.input["n"], "gate": None})
    return NodeResult(answer, is_result=True)


async def owned_parent(store: Store, run_id: str) -> tuple[Runtime, int]:
    """A queued guarded parent, claimed by worker w1 with a lease that has already run out
    (so w2 may take it over without anyone sleeping): the runtime and w1's epoch."""
    rt = Runtime(store, owner="w1")
    await rt.create(guarded, {"n": 3}, run_id=run_id)
    [claim] = await store.leases.claim("w1", 1, -1.0)
    assert claim.run_id == run_id
    return rt, claim.epoch


async def test_a_fenced_off_parents_child_is_fenced_too(store: Store) -> None:
    p = uid("fenced")
    rt, epoch = await owned_parent(store, p)

    async def taken_over() -> None:
        # Another worker takes the parent while w1's node is about to start the child.
        claim = await store.leases.take(p, "w2", 60)
        assert claim is not None and claim.epoch == epoch + 1

    BEFORE_CHILD[p] = taken_over
    with pytest.raises(StaleEpoch):
        await rt.resume(p, epoch=epoch)
    # The child was created (seq 0 is a function of the parent's node) and nothing more:
    # w1 could not adopt it, so none of its nodes ran or were recorded.
    [child_info] = [r for r in await store.runs.list() if r.parent_run_id == p]
    records = decode_log(child_info.run_id, await store.log.read_all(child_info.run_id))
    assert [r.WhichOneof("body") for r in records] == ["run_started"]
    assert not [k for k in EXECUTIONS if k.startswith(f"{child_info.run_id}:")]
    assert child_info.epoch == 0
    BEFORE_CHILD.pop(p)


async def test_a_worker_owned_parent_adopts_its_child_at_an_epoch_of_its_own(
    store: Store,
) -> None:
    p = uid("adopts")
    rt, epoch = await owned_parent(store, p)

    async def nothing() -> None:
        return None

    BEFORE_CHILD[p] = nothing
    outcome = await rt.resume(p, epoch=epoch)
    assert outcome.status is Status.SUCCEEDED and outcome.result == "3 steps"
    [child_info] = [r for r in await store.runs.list() if r.parent_run_id == p]
    assert child_info.epoch == 1  # adopted: the child's appends were fenced at its epoch
    records = decode_log(child_info.run_id, await store.log.read_all(child_info.run_id))
    resumed = [r.run_resumed for r in records if r.HasField("run_resumed")]
    assert [(r.owner, r.epoch) for r in resumed] == [("w1", 1)]
    # The adoption is fenced by the parent's epoch: an older one is refused.
    with pytest.raises(StaleEpoch):
        await store.leases.adopt_child(child_info.run_id, "w0", p, epoch - 1)
    BEFORE_CHILD.pop(p)


twins = Registry("test.parent.twins", entry="both")


@twins.node("both")
async def both(ctx: Context, node: Node) -> NodeResult:
    short = await ctx.run_child(child, {"n": 2, "gate": None}, key="short")
    long = await ctx.run_child(child, {"n": 4, "gate": None}, key="long")
    return NodeResult([short, long], is_result=True)


async def test_two_children_of_one_node_with_different_keys_are_two_runs(store: Store) -> None:
    p = uid("twins")
    outcome = await Runtime(store).start(twins, None, run_id=p)
    assert outcome.status is Status.SUCCEEDED
    assert outcome.result == ["2 steps", "4 steps"]
    node_id = outcome.graph.order[0]
    short, long = child_run_id(p, node_id, "short"), child_run_id(p, node_id, "long")
    assert {r.run_id for r in await store.runs.list() if r.parent_run_id == p} == {short, long}
    for run_id, n in ((short, 2), (long, 4)):
        records = decode_log(run_id, await store.log.read_all(run_id))
        assert sum(r.HasField("node_completed") for r in records) == n
