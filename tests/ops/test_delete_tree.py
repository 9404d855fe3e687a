"""Deletes keep the tree whole, on SQLite, PostgreSQL and memory: a sub-agent run of an
unfinished parent is not deleted, a parent goes with its sub-agent runs, and no delete or
prune leaves a parent whose sub-agent run is gone or a sub-agent run whose parent is, even
when a retry reopens a run in the middle of it."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.agents import uid
from tests.ops.test_retention import HOUR, make_run, run_ids
from tests.retry_agents import agent
from tests.test_cli import tether
from tether import RunNotRetryable, Runtime, Status, Store
from tether.control import actions
from tether.foundation.errors import ParentIsLive, RunIsLive
from tether.ops import delete_run, prune
from tether.ops.retention import remove_runs


async def dangling(store: Store) -> list[str]:
    """Runs whose parent run is gone: links pointing nowhere."""
    infos = await store.runs.list(limit=10_000)
    present = {info.run_id for info in infos}
    return [i.run_id for i in infos if i.parent_run_id and i.parent_run_id not in present]


async def test_a_sub_agent_run_of_an_unfinished_parent_is_not_deleted(store: Store) -> None:
    await make_run(store, "p", Status.PAUSED)
    await make_run(store, "p.child", Status.SUCCEEDED, parent="p")
    await make_run(store, "p.child.deep", Status.SUCCEEDED, parent="p.child")
    await make_run(store, "w", Status.WAITING)
    await make_run(store, "w.child", Status.FAILED, parent="w")
    with pytest.raises(
        ParentIsLive,
        match=r"'p\.child' was not deleted: it is a sub-agent run of 'p', which is paused",
    ):
        await delete_run(store, "p.child")
    with pytest.raises(ParentIsLive, match=r"sub-agent run of 'p', which is paused"):
        await delete_run(store, "p.child.deep")
    with pytest.raises(ParentIsLive, match=r"sub-agent run of 'w', which is waiting"):
        await delete_run(store, "w.child")
    assert await run_ids(store) == {"p", "p.child", "p.child.deep", "w", "w.child"}
    for run_id in ("p.child", "p.child.deep", "w.child"):
        assert len(await store.log.read(run_id)) == 3

    # Once the parent has finished, its sub-agent run may be erased on its own.
    await store.runs.set_status("p", Status.SUCCEEDED)
    report = await delete_run(store, "p.child")
    assert report.runs == 2
    assert await run_ids(store) == {"p", "w", "w.child"}


async def test_deleting_a_parent_deletes_its_sub_agent_runs_in_the_same_operation(
    store: Store,
) -> None:
    await make_run(store, "top", Status.FAILED)
    await make_run(store, "top.a", Status.SUCCEEDED, parent="top")
    await make_run(store, "top.b", Status.FAILED, parent="top")
    await make_run(store, "top.a.x", Status.CANCELLED, parent="top.a")
    await make_run(store, "other", Status.SUCCEEDED)
    report = await delete_run(store, "top", batch_rows=2)
    assert (report.runs, report.rows) == (4, 12)
    assert await run_ids(store) == {"other"}
    for run_id in ("top", "top.a", "top.b", "top.a.x"):
        assert await store.log.read(run_id) == []
    assert await dangling(store) == []


async def _failed_family(store: Store, tmp_path: Path) -> tuple[str, Path]:
    """A failed run whose sub-agent run failed it (both finished `failed`)."""
    child_outage = tmp_path / f"child-outage-{uid('m')}"
    child_outage.touch()
    given = {"outage": str(tmp_path / "none"), "child": True, "child_outage": str(child_outage)}
    outcome = await Runtime(store).start(agent, given, run_id=uid("fam"))
    assert outcome.status is Status.FAILED
    family = await store.retention.families([outcome.run_id])
    assert len(family) == 2 and all(info.status is Status.FAILED for info in family)
    return outcome.run_id, child_outage


async def test_a_delete_a_retry_got_ahead_of_deletes_nothing(store: Store, tmp_path: Path) -> None:
    run_id, child_outage = await _failed_family(store, tmp_path)
    ids = [info.run_id for info in await store.retention.families([run_id])]
    logs = {i: await store.log.read_all(i) for i in ids}
    # The family was looked at (all finished), then a retry reopened the parent.
    assert await actions.retry(Runtime(store), run_id, ttl=30) is Status.QUEUED
    with pytest.raises(RunIsLive, match="is queued"):
        await remove_runs(store, ids, batch_rows=1)
    assert await run_ids(store) == set(ids)
    assert await dangling(store) == []
    child = ids[1]
    assert await store.log.read_all(child) == logs[child]  # not a row gone
    assert (await store.log.read_all(run_id))[: len(logs[run_id])] == logs[run_id]
    child_outage.unlink()
    done = await Runtime(store).resume(run_id)  # the retry goes on, its sub-agent run too
    assert done.status is Status.SUCCEEDED, done.reason
    assert done.result == ["child's answer", "steady"]


async def test_a_retry_of_a_run_being_deleted_is_refused(store: Store, tmp_path: Path) -> None:
    run_id, _ = await _failed_family(store, tmp_path)
    ids = [info.run_id for info in await store.retention.families([run_id])]
    assert await store.retention.seal(ids) == 2  # a delete under way marked the family
    with pytest.raises(RunNotRetryable, match="is being deleted"):
        await actions.retry(Runtime(store), run_id, ttl=30)
    await remove_runs(store, ids, batch_rows=1)
    assert await run_ids(store) == set()


async def test_pruning_never_leaves_a_link_pointing_nowhere(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raced, _ = await _failed_family(store, tmp_path)
    await make_run(store, "done", Status.SUCCEEDED)
    await make_run(store, "done.child", Status.SUCCEEDED, parent="done")
    await make_run(store, "half", Status.SUCCEEDED)
    await make_run(store, "half.child", Status.RUNNING, parent="half")
    # A retry reopens one run between the prune's look at the families and its delete.
    looked = store.retention.families
    family = [info.run_id for info in await looked([raced])]
    retried = []

    async def families_then_a_retry(run_ids: list[str]) -> object:
        found = await looked(run_ids)
        if raced in run_ids and not retried:
            retried.append(await actions.retry(Runtime(store), raced, ttl=30))
        return found

    monkeypatch.setattr(store.retention, "families", families_then_a_retry)
    report = await prune(store, older_than=HOUR, now=time.time() + 2 * HOUR)
    monkeypatch.undo()
    assert report.run_ids == ["done"] and report.skipped == 2
    assert await dangling(store) == []
    assert retried == [Status.QUEUED]
    assert await run_ids(store) == {*family, "half", "half.child"}  # the reopened one whole
    graph = await Runtime(store).load(raced)
    assert graph.status is Status.RUNNING and len(graph.retries) == 1


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runs.db'}"
    url: str = request.getfixturevalue("fresh_pg_database")
    return url


def test_tether_runs_delete_keeps_the_demo_tree_whole(tmp_path: Path, db: str) -> None:
    def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return tether(tmp_path, "--db", db, *args, check=check, stdin=subprocess.DEVNULL)

    out = cli("demo", "--approve", "--quiet").stdout  # parks at its approval
    run_id = out.split("run id: ")[1].split()[0]
    runs = json.loads(cli("runs", "--json").stdout)
    [child] = [r["run_id"] for r in runs if r["parent_run_id"] == run_id]
    refused = cli("runs", "delete", child, check=False)
    assert refused.returncode == 2
    assert f"it is a sub-agent run of '{run_id}', which is waiting" in refused.stderr
    assert {r["run_id"] for r in json.loads(cli("runs", "--json").stdout)} == {run_id, child}

    key = out.split(f"tether signal {run_id} ")[1].split()[0]
    cli("signal", run_id, key, "--data", '{"approve": true}')
    assert "status: succeeded" in cli("resume", run_id, "--quiet").stdout
    deleted = cli("runs", "delete", run_id).stdout
    assert f"deleted run {run_id}" in deleted
    assert json.loads(cli("runs", "--json").stdout) == []
