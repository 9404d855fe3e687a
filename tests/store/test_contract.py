"""The same rules for every backend: each test runs on SQLite, PostgreSQL and memory."""

from __future__ import annotations

from typing import Any

import pytest

from tether.foundation.errors import ConflictingRecord, RunExists, StaleEpoch, UnknownRun
from tether.store import RunFilter, RunInfo, Status, Store, state_filter


def run(run_id: str, *, epoch: int = 0, status: Status = Status.QUEUED) -> RunInfo:
    return RunInfo(run_id=run_id, agent="agent", status=status, epoch=epoch)


async def test_append_then_read_in_seq_order(store: Store) -> None:
    await store.log.append("r", [(2, b"two"), (0, b"zero")])
    await store.log.append("r", [(1, b"one")])
    assert await store.log.read("r") == [(0, b"zero"), (1, b"one"), (2, b"two")]
    assert await store.log.read_all("r") == [b"zero", b"one", b"two"]
    assert await store.log.read("other") == []


async def test_read_after_seq(store: Store) -> None:
    await store.log.append("r", [(i, bytes([i])) for i in range(5)])
    assert await store.log.read("r", after_seq=2) == [(3, b"\x03"), (4, b"\x04")]
    assert await store.log.read("r", after_seq=4) == []


async def test_retried_append_of_the_same_records_is_a_no_op(store: Store) -> None:
    await store.log.append("r", [(0, b"a"), (1, b"b")])
    await store.log.append("r", [(0, b"a"), (1, b"b")])
    # A retry that overlaps what landed and adds more: the new part lands.
    await store.log.append("r", [(1, b"b"), (2, b"c")])
    assert await store.log.read("r") == [(0, b"a"), (1, b"b"), (2, b"c")]


async def test_a_different_record_at_a_taken_seq_conflicts(store: Store) -> None:
    await store.log.append("r", [(0, b"a")])
    with pytest.raises(ConflictingRecord) as err:
        await store.log.append("r", [(0, b"A")])
    assert (err.value.run_id, err.value.seq) == ("r", 0)
    assert await store.log.read("r") == [(0, b"a")]


async def test_a_multi_row_append_lands_whole_or_not_at_all(store: Store) -> None:
    await store.log.append("r", [(1, b"b")])
    with pytest.raises(ConflictingRecord) as err:
        await store.log.append("r", [(0, b"a"), (1, b"B"), (2, b"c")])
    assert err.value.seq == 1
    assert await store.log.read("r") == [(1, b"b")]


async def test_create_writes_the_run_and_its_seq_0_record(store: Store) -> None:
    await store.runs.create(run("r", status=Status.RUNNING), b"first")
    info = await store.runs.get("r")
    assert info is not None
    assert (info.run_id, info.agent, info.status, info.epoch) == ("r", "agent", Status.RUNNING, 0)
    assert info.created_at > 0 and info.updated_at == info.created_at
    assert await store.log.read("r") == [(0, b"first")]
    assert await store.runs.get("missing") is None


async def test_create_of_a_taken_run_id_raises_run_exists(store: Store) -> None:
    await store.runs.create(run("r"), b"first")
    with pytest.raises(RunExists):
        await store.runs.create(run("r"), b"second")
    assert await store.log.read("r") == [(0, b"first")]


async def test_set_status(store: Store) -> None:
    await store.runs.create(run("r"), b"first")
    await store.runs.set_status("r", Status.PAUSED, reason="budget")
    info = await store.runs.get("r")
    assert info is not None
    assert (info.status, info.reason) == (Status.PAUSED, "budget")
    assert info.updated_at >= info.created_at
    await store.runs.set_status("r", Status.RUNNING)
    info = await store.runs.get("r")
    assert info is not None and (info.status, info.reason) == (Status.RUNNING, None)
    with pytest.raises(UnknownRun):
        await store.runs.set_status("missing", Status.FAILED)


async def test_list_filters_by_status_and_pages_newest_first(store: Store) -> None:
    for i in range(7):
        await store.runs.create(run(f"r{i}"), b"first")
    for i in (1, 4, 5):
        await store.runs.set_status(f"r{i}", Status.RUNNING)
    everything = await store.runs.list()
    assert len(everything) == 7
    assert everything == sorted(everything, key=lambda r: (-r.created_at, r.run_id))
    pages = [await store.runs.list(limit=3, offset=o) for o in (0, 3, 6)]
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [r for page in pages for r in page] == everything
    running = await store.runs.list(status=Status.RUNNING)
    assert {r.run_id for r in running} == {"r1", "r4", "r5"}
    assert [r.run_id for r in running] == [r.run_id for r in everything if r in running]
    assert await store.runs.list(status=Status.RUNNING, limit=2, offset=2) == running[2:]
    assert await store.runs.list(status=Status.FAILED) == []


async def test_list_filters_by_agent_id_prefix_and_parent(store: Store) -> None:
    rows = [
        RunInfo("a1", "alpha", Status.QUEUED),
        RunInfo("a1.n1", "helper", Status.RUNNING, parent_run_id="a1"),
        RunInfo("a1.n1.k.n2", "helper", Status.RUNNING, parent_run_id="a1.n1"),
        RunInfo("a1.n3", "helper", Status.SUCCEEDED, parent_run_id="a1"),
        RunInfo("b2", "beta", Status.RUNNING),
        RunInfo("a15", "alpha", Status.RUNNING),
    ]
    for info in rows:
        await store.runs.create(info, b"first")

    async def ids(status: Status | None = None, **where: Any) -> set[str]:
        return {r.run_id for r in await store.runs.list(status=status, where=RunFilter(**where))}

    assert await ids(agent="alpha") == {"a1", "a15"}
    assert await ids(Status.RUNNING, agent="alpha") == {"a15"}
    assert await ids(run_id_prefix="a1.") == {"a1.n1", "a1.n1.k.n2", "a1.n3"}
    assert await ids(run_id_prefix="a1") == {"a1", "a1.n1", "a1.n1.k.n2", "a1.n3", "a15"}
    assert await ids(run_id_prefix="%") == set()  # no pattern language: a plain prefix
    assert await ids(parent_run_id="a1") == {"a1.n1", "a1.n3"}
    assert await ids(Status.RUNNING, parent_run_id="a1") == {"a1.n1"}
    assert await ids(top_level=True) == {"a1", "b2", "a15"}
    assert await ids(top_level=True, agent="beta") == {"b2"}
    top = await store.runs.list(where=RunFilter(top_level=True), limit=2, offset=1)
    assert len(top) == 2


async def test_list_tells_orphaned_runs_from_running_ones_by_the_stores_clock(
    store: Store,
) -> None:
    await store.runs.create(run("live", status=Status.RUNNING), b"first", lease_s=600)
    await store.runs.create(run("dead", status=Status.RUNNING), b"first", lease_s=-60)
    await store.runs.create(run("unleased", status=Status.RUNNING), b"first")
    await store.runs.create(run("paused", status=Status.PAUSED), b"first", lease_s=-60)
    now = await store.runs.clock()

    async def ids(state: str, **where: Any) -> set[str]:
        status, where_ = state_filter(state, RunFilter(**where))
        return {r.run_id for r in await store.runs.list(status=status, where=where_)}

    assert await ids("orphaned") == {"dead"}
    assert await ids("running") == {"live", "unleased"}
    assert await ids("paused") == {"paused"}
    assert await ids("orphaned", agent="nobody") == set()
    assert {r.run_id: r.state(now) for r in await store.runs.list()}["dead"] == "orphaned"
    with pytest.raises(ValueError, match="unknown status 'zombie': one of queued, "):
        state_filter("zombie")


async def test_a_fenced_append_lands_at_the_current_epoch(store: Store) -> None:
    await store.runs.create(run("r", epoch=3), b"first")
    await store.log.append("r", [(1, b"a"), (2, b"b")], epoch=3)
    assert await store.log.read("r", after_seq=0) == [(1, b"a"), (2, b"b")]


async def test_a_fenced_append_at_a_stale_epoch_is_rejected_and_writes_nothing(
    store: Store,
) -> None:
    await store.runs.create(run("r", epoch=3), b"first")
    with pytest.raises(StaleEpoch) as err:
        await store.log.append("r", [(1, b"a"), (2, b"b")], epoch=2)
    assert (err.value.run_id, err.value.epoch) == ("r", 2)
    assert await store.log.read("r") == [(0, b"first")]


async def test_a_fenced_append_to_an_unknown_run_is_rejected(store: Store) -> None:
    with pytest.raises(StaleEpoch):
        await store.log.append("missing", [(0, b"a")], epoch=0)
    assert await store.log.read("missing") == []
