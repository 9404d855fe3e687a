"""Invariant 5: replay is a pure function of the log.

Random dynamic graphs (fan-out, joins, sub-agents, retried failures) are cut at random
points (before an append, after one, or by a drain), rehydrated and continued; the records
must be exactly those of an uninterrupted run, each node recorded once.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.agents import randomgraph
from tether import Runtime, Status, Store, store_from_url
from tether.records import Record, decode_log

_names = itertools.count()


async def canonical(store: Store, run_id: str) -> dict[str, Any]:
    """The run's node records and ending, with timings and run-id prefixes removed."""
    out: dict[str, Any] = {"nodes": {}, "children": {}}
    records = decode_log(run_id, await store.log.read_all(run_id))
    for rec in records:
        body = rec.WhichOneof("body")
        if body == "node_completed":
            nc = rec.node_completed
            assert nc.node_id not in out["nodes"], f"{run_id}: node {nc.node_id} recorded twice"
            out["nodes"][nc.node_id] = (
                nc.kind,
                tuple(nc.parent_ids),
                nc.output.json,
                tuple((s.node_id, s.kind, tuple(s.parent_ids), s.input.json) for s in nc.spawned),
                nc.is_result,
                nc.used.tokens_in + nc.used.tokens_out,
            )
        elif body == "run_finished":
            out["finished"] = (rec.run_finished.status, rec.run_finished.result.json)
    for info in await store.runs.list(limit=10_000):
        if info.parent_run_id == run_id:
            suffix = info.run_id.removeprefix(run_id)
            out["children"][suffix] = await canonical(store, info.run_id)
    return out


async def scenario(url: str, seed: int, cut: int, mode: str) -> None:
    n = next(_names)
    ref_id, cut_id = f"ref-{n}-{seed}", f"cut-{n}-{seed}"
    payload = {"seed": seed, "depth": 0}
    async with store_from_url(url) as store:
        reference = await Runtime(store).start(randomgraph, payload, run_id=ref_id)
        assert reference.status is Status.SUCCEEDED

        rt = Runtime(store)
        task = asyncio.ensure_future(rt.start(randomgraph, payload, run_id=cut_id))
        cut_at: Callable[[], None] = rt.drain if mode == "drain" else task.cancel
        seen = 0

        def on_record(run_id: str, seq: int, record: Record) -> None:
            nonlocal seen
            if mode != "before_append" and record.WhichOneof("body") == "node_completed":
                seen += 1
                if seen == cut:
                    cut_at()

        def on_event(run_id: str, node_id: str, event: dict[str, Any]) -> None:
            nonlocal seen
            if mode == "before_append" and event["type"] == "node_started":
                seen += 1
                if seen == cut:
                    cut_at()

        rt.events.on_record(on_record)
        rt.events.on_event(on_event)
        try:
            outcome = await task
        except asyncio.CancelledError:
            outcome = None
        for _ in range(5):  # a resume may itself be cut by a drained child; bounded
            if outcome is not None and outcome.status is Status.SUCCEEDED:
                break
            fresh = Runtime(store)
            # A cut that lands as the run finishes leaves nothing to resume.
            finished = (await fresh.load(cut_id)).finished is not None
            outcome = await (fresh.outcome(cut_id) if finished else fresh.resume(cut_id))
        assert outcome is not None and outcome.status is Status.SUCCEEDED
        assert outcome.result == reference.result
        assert await canonical(store, cut_id) == await canonical(store, ref_id)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 2**32),
    cut=st.integers(1, 30),
    mode=st.sampled_from(["after_append", "before_append", "drain"]),
)
def test_invariant_5_rehydrate_then_continue_equals_an_uninterrupted_run(
    store_url: str, seed: int, cut: int, mode: str
) -> None:
    asyncio.run(scenario(store_url, seed, cut, mode))
