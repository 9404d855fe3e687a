"""Pinning on every backend: a claim takes only the runs its versions admit; the workers
table lists live workers and forgets dead ones."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.clock import ManualClock
from tether.foundation import clock as tether_clock
from tether.store import RunInfo, Status, Store
from tether.store.base import Serves, Stranded
from tether.store.workers import Served, WorkerInfo


@pytest.fixture(autouse=True)
def clock() -> Iterator[ManualClock]:
    with tether_clock.use(ManualClock()) as manual:
        yield manual


async def add(store: Store, run_id: str, agent: str, version: str | None) -> None:
    tether_clock.current().advance(1.0)  # type: ignore[attr-defined]
    info = RunInfo(run_id=run_id, agent=agent, status=Status.QUEUED, agent_version=version)
    await store.runs.create(info, b"0")


async def test_a_claim_takes_only_the_runs_its_versions_admit(store: Store) -> None:
    await add(store, "v1", "a", "1")
    await add(store, "v2", "a", "2")
    await add(store, "old", "a", None)  # older than versions: any worker of `a`
    await add(store, "other", "b", "1")
    info = await store.runs.get("v1")
    assert info is not None and info.agent_version == "1"

    v2 = Serves({"a": "2"})
    stranded = await store.leases.stranded(v2, [], 10)
    assert stranded == [Stranded("v1", "a", "1"), Stranded("other", "b", "1")]
    assert await store.leases.stranded(v2, ["v1"], 10) == [Stranded("other", "b", "1")]
    claims = await store.leases.claim("w2", 10, 5.0, serves=v2)
    assert sorted(c.run_id for c in claims) == ["old", "v2"]
    # A run of another version that the worker's code checked: named in `also`.
    [moved] = await store.leases.claim("w2", 10, 5.0, serves=Serves({"a": "2"}, also=["v1"]))
    assert moved.run_id == "v1"
    assert await store.leases.claim("w2", 10, 5.0, serves=v2) == []
    [anyone] = await store.leases.claim("w3", 10, 5.0)  # no pinning: in-process callers
    assert anyone.run_id == "other"


async def test_moving_a_run_to_another_version_updates_its_row(store: Store) -> None:
    await add(store, "r", "a", "1")
    [claim] = await store.leases.claim("w", 1, 5.0, serves=Serves({"a": "1"}))
    await store.runs.set_status("r", Status.RUNNING, epoch=claim.epoch, version="2")
    await store.runs.set_status("r", Status.RUNNING, epoch=claim.epoch)  # keeps it
    info = await store.runs.get("r")
    assert info is not None and info.agent_version == "2"
    [listed] = await store.runs.list()
    assert listed.agent_version == "2"


async def test_workers_advertise_versions_and_dead_ones_age_out(store: Store) -> None:
    served = {"a": Served("2", ("1",)), "b": Served("7", judged=True)}
    one = WorkerInfo("w1", "h", 11, 100.0, ttl=30.0, versions=served, runs_held=3)
    await store.workers.beat(one)
    await store.workers.beat(WorkerInfo("w2", "h", 12, 101.0, ttl=-1.0))  # dead on arrival
    [live] = await store.workers.live()
    assert (live.owner, live.pid, live.runs_held, live.versions) == ("w1", 11, 3, served)
    assert live.beat_at > 0 and live.as_dict(live.beat_at)["versions"]["a"] == {
        "version": "2",
        "compatible": ["1"],
        "judged": False,
    }
    await store.workers.beat(WorkerInfo("w1", "h", 11, 100.0, ttl=30.0, runs_held=1))
    [again] = await store.workers.live()
    assert again.runs_held == 1 and again.started_at == 100.0
    await store.workers.leave("w1")
    assert await store.workers.live() == []
