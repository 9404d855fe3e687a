"""A run whose log loses its tail behind its back reloads and re-executes what was lost.

What a failover to an asynchronous standby does to a run, made on one server: the tail of
an executing run's log is deleted while one of its nodes is in flight (the commits the
standby never received). The node's record, at the seq the executor's graph expects, no
longer follows the log: the append is refused (LogGap), the run stops, is read again from
its log and continued from the surviving prefix. The nodes whose records were lost, and
the node whose record was refused, run again, once each; every other node once; the log
ends without a gap, each node recorded once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

import pytest

from tests.store.test_log_gaps import lose_tail
from tether import Context, Node, NodeResult, Registry, Runtime, Spawn, Status
from tether.store import Store

CHAIN = 10
GATE = 6  # the node in flight when the tail goes
LOST = 3  # the records of the nodes before it that the log loses

holes = Registry("tests.seq_holes", entry="step")
EXECUTIONS: Counter[str] = Counter()
gate_reached: asyncio.Event
gate_open: asyncio.Event


@holes.node("step")
async def step(ctx: Context, node: Node) -> NodeResult:
    i = int(node.input)
    EXECUTIONS[f"n{i}"] += 1
    if i == GATE:
        gate_reached.set()
        await gate_open.wait()
    if i + 1 == CHAIN:
        return NodeResult(i, is_result=True)
    return NodeResult(i, spawn=[Spawn("step", i + 1, key="next")])


@pytest.mark.parametrize("how", ["start", "resume"])
async def test_a_run_whose_log_lost_its_tail_reloads_and_reexecutes_the_lost_nodes_once(
    durable_store: Store, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    global gate_reached, gate_open
    gate_reached, gate_open = asyncio.Event(), asyncio.Event()
    EXECUTIONS.clear()
    rt = Runtime(durable_store)
    if how == "start":
        task = asyncio.create_task(rt.start(holes, 0, run_id="holes"))
    else:  # a queued run taken up by resume (a worker's path: continue_graph)
        await rt.submit(holes, 0, run_id="holes")
        task = asyncio.create_task(rt.resume("holes"))
    await gate_reached.wait()
    rows = await durable_store.log.read("holes")
    # seq 0 RunStarted (then RunResumed if resumed), then one record for each node before it.
    first_node_seq = 1 if how == "start" else 2
    assert len(rows) == first_node_seq + GATE
    cut = rows[-LOST][0]
    await lose_tail(durable_store, "holes", cut)
    with caplog.at_level(logging.WARNING, logger="tether.engine.runtime"):
        gate_open.set()
        outcome = await task
    assert outcome.status is Status.SUCCEEDED and outcome.result == CHAIN - 1
    lost = {f"n{i}" for i in range(GATE - LOST, GATE)}
    # The lost nodes and the node whose record was refused ran again, once; no other did.
    again = {name for name, n in EXECUTIONS.items() if n == 2}
    assert again == lost | {f"n{GATE}"}, EXECUTIONS
    assert all(n in (1, 2) for n in EXECUTIONS.values()) and len(EXECUTIONS) == CHAIN
    # The log has no gap and records each node once.
    seqs = [seq for seq, _ in await durable_store.log.read("holes")]
    assert seqs == list(range(len(seqs)))
    graph = await rt.load("holes")
    assert len(graph.order) == len(set(graph.order)) == CHAIN
    assert graph.status is Status.SUCCEEDED
    info = await durable_store.runs.get("holes")
    assert info is not None and info.status is Status.SUCCEEDED and info.owner is None
    (line,) = [r.getMessage() for r in caplog.records if "reloaded from its log" in r.message]
    assert f"append at seq {cut + LOST} refused" in line
    assert f"last record is at seq {cut - 1}" in line
    assert f"{LOST} nodes whose records were lost run again" in line
