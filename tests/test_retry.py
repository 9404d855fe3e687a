"""Retrying a failed run (`tether.control.actions.retry`): on SQLite and PostgreSQL, the run's
records stay, its failed nodes run again as new attempts numbered after the last, the run
continues, and replay explains it (a RunResumed with `retry` after the RunFinished)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.agents import uid
from tests.retry_agents import STARTS, agent
from tether import Budget, RunNotRetryable, Runtime, Status, UnknownRun
from tether.control import actions
from tether.foundation.ids import child_run_id
from tether.model.graph import Graph
from tether.model.records import decode_one
from tether.model.run_view import run_view
from tether.store import Store


def _outage(tmp_path: Path, name: str = "outage") -> Path:
    marker = tmp_path / name
    marker.touch()
    return marker


async def _failed_run(store: Store, tmp_path: Path, **extra: object) -> tuple[str, Path]:
    marker = _outage(tmp_path)
    run_id = uid("retry")
    outcome = await Runtime(store).start(agent, {"outage": str(marker), **extra}, run_id=run_id)
    assert outcome.status is Status.FAILED, outcome.reason
    return run_id, marker


def _flaky(graph: Graph) -> str:
    return next(n for n, s in graph.nodes.items() if s.spec.kind == "flaky")


async def test_a_failed_run_retried_keeps_its_records_and_reruns_its_failed_node(
    durable_store: Store, tmp_path: Path
) -> None:
    run_id, marker = await _failed_run(durable_store, tmp_path)
    before = await durable_store.log.read_all(run_id)
    failed = await Runtime(durable_store).load(run_id)
    a = _flaky(failed)
    assert [f.attempt for f in failed.failures_of(a)] == [2]  # its retry policy: 2 attempts
    assert "ConnectionError: model unreachable (attempt 2)" in failed.reason
    done_before = set(failed.order)

    marker.unlink()  # the outage is over
    runtime = Runtime(durable_store)
    outcome = await actions.retry_here(runtime, run_id)
    assert outcome.status is Status.SUCCEEDED, outcome.reason
    assert outcome.result == ["answer after attempt 3", "steady"]

    after = await durable_store.log.read_all(run_id)
    assert after[: len(before)] == before  # everything it recorded stays, byte for byte
    retry = decode_one(run_id, len(before), after[len(before)])
    assert retry.HasField("run_resumed") and retry.run_resumed.retry
    # Nodes recorded before the failure never ran again; only the failed one did.
    for nid in done_before:
        assert STARTS[f"{run_id}:{nid}"] == 1
    assert STARTS[f"{run_id}:{a}"] == 3

    graph = await Runtime(durable_store).load(run_id)  # replay explains the retry
    assert graph.status is Status.SUCCEEDED
    [r] = graph.retries
    assert r.seq == len(before) and r.node_ids == (a,) and "model unreachable" in r.error
    completed = graph.completed(a)
    assert completed is not None and completed.attempt == 3
    view = run_view(graph)
    assert view["retries"] == [{"seq": r.seq, "at_us": r.at_us, "error": r.error, "node_ids": [a]}]
    node = next(n for n in view["nodes"] if n["node_id"] == a)
    assert node["status"] == "completed"
    assert [(x["attempt"], x["status"]) for x in node["attempts"]] == [
        (2, "failed"),
        (3, "completed"),
    ]
    info = await durable_store.runs.get(run_id)
    assert info is not None and info.status is Status.SUCCEEDED and info.lease_until is None


async def test_a_retried_run_that_fails_again_can_be_retried_again(
    durable_store: Store, tmp_path: Path
) -> None:
    run_id, marker = await _failed_run(durable_store, tmp_path)
    again = await actions.retry_here(Runtime(durable_store), run_id)  # the outage goes on
    assert again.status is Status.FAILED
    a = _flaky(again.graph)
    # A new round of its retry policy, numbered after the last attempt.
    assert [f.attempt for f in again.graph.failures_of(a)] == [2, 4]
    assert "(attempt 4)" in again.reason

    marker.unlink()
    done = await actions.retry_here(Runtime(durable_store), run_id)
    assert done.status is Status.SUCCEEDED
    assert done.result == ["answer after attempt 5", "steady"]
    graph = await Runtime(durable_store).load(run_id)
    assert [r.node_ids for r in graph.retries] == [(a,), (a,)]
    assert [f.attempt for f in graph.failures_of(a)] == [2, 4]
    assert STARTS[f"{run_id}:{a}"] == 5


async def test_retry_queues_the_run_for_whoever_takes_it(
    durable_store: Store, tmp_path: Path
) -> None:
    run_id, marker = await _failed_run(durable_store, tmp_path)
    marker.unlink()
    status = await actions.retry(Runtime(durable_store), run_id, ttl=30)
    assert status is Status.QUEUED
    info = await durable_store.runs.get(run_id)
    assert info is not None and info.status is Status.QUEUED and info.lease_until is None
    graph = await Runtime(durable_store).load(run_id)
    assert graph.finished is None and len(graph.retries) == 1
    # A worker (or `tether resume`) continues it from the log: the retry is recorded there.
    outcome = await Runtime(durable_store).resume(run_id)
    assert outcome.status is Status.SUCCEEDED
    assert outcome.result == ["answer after attempt 3", "steady"]


async def test_retrying_a_run_that_did_not_fail_is_refused(
    durable_store: Store, tmp_path: Path
) -> None:
    runtime = Runtime(durable_store)
    ok = await runtime.start(agent, {"outage": str(tmp_path / "none")}, run_id=uid("ok"))
    assert ok.status is Status.SUCCEEDED
    rows = await durable_store.log.read_all(ok.run_id)
    with pytest.raises(RunNotRetryable, match="is succeeded, not failed; only a failed run"):
        await actions.retry(runtime, ok.run_id, ttl=30)
    with pytest.raises(RunNotRetryable, match="is succeeded, not failed; only a failed run"):
        await actions.retry_here(runtime, ok.run_id)
    assert await durable_store.log.read_all(ok.run_id) == rows
    info = await durable_store.runs.get(ok.run_id)
    assert info is not None and info.status is Status.SUCCEEDED

    paused = await runtime.start(
        agent, {"outage": str(tmp_path / "none")}, run_id=uid("paused"), budget=Budget(max_nodes=1)
    )
    assert paused.status is Status.PAUSED
    with pytest.raises(RunNotRetryable, match="is paused, not failed"):
        await actions.retry(runtime, paused.run_id, ttl=30)
    info = await durable_store.runs.get(paused.run_id)
    assert info is not None and info.status is Status.PAUSED

    with pytest.raises(UnknownRun):
        await actions.retry(runtime, "no-such-run", ttl=30)


async def test_a_failed_sub_agent_run_is_retried_with_its_parent(
    durable_store: Store, tmp_path: Path
) -> None:
    child_marker = _outage(tmp_path, "child-outage")
    runtime = Runtime(durable_store)
    run_id = uid("parent")
    given = {"outage": str(tmp_path / "none"), "child": True, "child_outage": str(child_marker)}
    failed = await runtime.start(agent, given, run_id=run_id)
    assert failed.status is Status.FAILED and "child's model unreachable" in failed.reason
    a = _flaky(failed.graph)
    child = child_run_id(run_id, a, "c")
    child_info = await durable_store.runs.get(child)
    assert child_info is not None and child_info.status is Status.FAILED
    with pytest.raises(RunNotRetryable, match=f"sub-agent run of {run_id}; retry its parent"):
        await actions.retry(runtime, child, ttl=30)

    child_marker.unlink()
    outcome = await actions.retry_here(Runtime(durable_store), run_id)
    assert outcome.status is Status.SUCCEEDED, outcome.reason
    assert outcome.result == ["child's answer", "steady"]
    graph = await Runtime(durable_store).load(child)
    assert graph.status is Status.SUCCEEDED and len(graph.retries) == 1
    lookup = next(n for n, s in graph.nodes.items() if s.spec.kind == "lookup")
    assert [f.attempt for f in graph.failures_of(lookup)] == [1]
    done = graph.completed(lookup)
    assert done is not None and done.attempt == 2
    child_info = await durable_store.runs.get(child)
    assert child_info is not None and child_info.status is Status.SUCCEEDED
