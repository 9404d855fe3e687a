"""Invariant 5: replay is a pure function of the log.

Random dynamic graphs (fan-out, joins, sub-agents, retried failures) are cut at random
points (before an append, after one, or by a drain), rehydrated and continued; the records
must be exactly those of an uninterrupted run, each node recorded once.

The cut point is drawn from the run's own length: the reference run counts the records it
appends (sub-agent runs included), and the cut lands at the append that holds the k-th of
them, for k drawn between 1 and that count, so every example interrupts the run.
`before_append` stops the run in that very append, before the store sees it (as a crash
would); `after_append` cancels it once the append returned; `drain` drains it there. The
cut run has a store of its own, closed after the cut (a dead process's connections), so
nothing it sent can land after the resume has read the log.

Examples: the `ci` profile by default; `pytest --hypothesis-profile=local` runs many more
(profiles in tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.agents import randomgraph
from tether import Runtime, Status, Store, store_from_url
from tether.model.records import decode_log
from tether.store.base import LogStore

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


class CountingLog(LogStore):
    """The real log, counting the records appended; at the append holding record `cut`,
    calls `at_cut` before the append (which then never reaches the store) or after it."""

    def __init__(self, inner: LogStore, cut: int = 0, mode: str = "") -> None:
        self.inner = inner
        self.cut = cut
        self.mode = mode
        self.records = 0
        self.at_cut: Callable[[], None] = lambda: None
        self.fired = False

    async def append(
        self, run_id: str, entries: Sequence[tuple[int, bytes]], *, epoch: int | None = None
    ) -> None:
        reaches = not self.fired and 0 < self.cut <= self.records + len(entries)
        if reaches and self.mode == "before_append":
            self.fired = True
            self.at_cut()
            await asyncio.Event().wait()  # the cancellation ends this append, unsent
        await self.inner.append(run_id, entries, epoch=epoch)
        self.records += len(entries)
        if reaches:
            self.fired = True
            self.at_cut()

    async def read(self, run_id: str, *, after_seq: int = -1) -> list[tuple[int, bytes]]:
        return await self.inner.read(run_id, after_seq=after_seq)


async def scenario(url: str, seed: int, draw_cut: Callable[[int], int], mode: str) -> None:
    n = next(_names)
    ref_id, cut_id = f"ref-{n}-{seed}", f"cut-{n}-{seed}"
    payload = {"seed": seed, "depth": 0}
    async with store_from_url(url) as store:
        counting = CountingLog(store.log)
        store.log = counting
        reference = await Runtime(store).start(randomgraph, payload, run_id=ref_id)
        store.log = counting.inner
        assert reference.status is Status.SUCCEEDED
        cut = draw_cut(counting.records)

        # The cut run's store: its own connections on a durable backend, closed after the
        # cut as a dead process's would be (the in-memory store has no other copy).
        async with contextlib.AsyncExitStack() as stack:
            cut_store = (
                store if url == "memory:" else await stack.enter_async_context(store_from_url(url))
            )
            log = CountingLog(cut_store.log, cut, mode)
            cut_store.log = log
            rt = Runtime(cut_store)
            task = asyncio.ensure_future(rt.start(randomgraph, payload, run_id=cut_id))
            log.at_cut = rt.drain if mode == "drain" else task.cancel
            try:
                outcome = await task
            except asyncio.CancelledError:
                outcome = None
            cut_store.log = log.inner
        assert log.fired, f"cut {cut} never reached: {log.records} records appended"

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
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 2**32),
    where=st.data(),
    mode=st.sampled_from(["after_append", "before_append", "drain"]),
)
def test_invariant_5_rehydrate_then_continue_equals_an_uninterrupted_run(
    store_url: str, seed: int, where: st.DataObject, mode: str
) -> None:
    def draw_cut(length: int) -> int:
        return where.draw(st.integers(1, length), label="cut at record")

    asyncio.run(scenario(store_url, seed, draw_cut, mode))
