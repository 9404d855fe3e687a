"""The worker in-process (fencing, draining) and `tether submit` + `tether worker` on SQLite."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from tests.agents import uid
from tests.test_cli import env, tether
from tether import Context, Node, Registry, Runtime, Status
from tether.control.worker import Worker
from tether.model.records import decode_log
from tether.store.postgres import PostgresStore


async def test_a_fenced_append_stops_the_run_and_says_why(
    pg_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    started, gate = asyncio.Event(), asyncio.Event()
    agent = Registry(uid("test.fence"), entry="slow")

    @agent.node("slow")
    async def slow(ctx: Context, node: Node) -> int:
        started.set()
        await gate.wait()
        return 1

    async with PostgresStore(pg_database, min_size=1, max_size=4) as store:
        runtime = Runtime(store, owner="w1")
        worker = Worker(runtime, lease_ttl=30, poll=0.05)
        run_id = await runtime.submit(agent)
        with caplog.at_level(logging.INFO, logger="tether.control.worker"):
            async with asyncio.TaskGroup() as tg:
                tg.create_task(worker.run())
                await started.wait()
                # Another worker takes the run over (its lease had expired, say).
                conn = await asyncpg.connect(pg_database)
                await conn.execute(
                    "UPDATE runs SET epoch = epoch + 1, owner = 'w2' WHERE run_id = $1", run_id
                )
                await conn.close()
                gate.set()
                for _ in range(500):  # bounded: the append is one round trip away
                    if worker.counts["fenced"]:
                        break
                    await asyncio.sleep(0.01)
                worker.stop()
        records = decode_log(run_id, await store.log.read_all(run_id))
        info = await store.runs.get(run_id)
    assert worker.statistics() == {"claimed": 1, "fenced": 1}
    assert f"run {run_id}: fenced off, epoch 1 is stale" in caplog.text
    # Nothing of the stale owner landed after its RunResumed, and the row is w2's.
    assert [r.WhichOneof("body") for r in records] == ["run_started", "run_resumed"]
    assert info is not None and (info.owner, info.epoch, info.status) == ("w2", 2, Status.RUNNING)


def test_submit_then_worker_drains_on_sigterm_and_another_finishes(tmp_path: Path) -> None:
    """The embedded SQLite mode: one worker process at a time, the same drain."""
    e = env(tmp_path)
    e["TETHER_DEMO_SPEED"] = "1"
    run_id = tether(tmp_path, "submit", "demo", "--input", '{"prompt": "q"}').stdout.strip()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tether", "worker", "--grace", "25"],
        cwd=tmp_path,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert "ready" in proc.stdout.readline()
    for line in proc.stderr:  # the handshake: the worker says it claimed the run
        if f"run {run_id}: claimed at epoch 1" in line:
            break
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert f"run {run_id}: released paused (drain)" in err
    rows = json.loads(tether(tmp_path, "runs", "--json").stdout)
    row = next(r for r in rows if r["run_id"] == run_id)
    assert (row["status"], row["reason"], row["owner"]) == ("paused", "drain", None)
    again = subprocess.Popen(
        [sys.executable, "-m", "tether", "worker"],
        cwd=tmp_path,
        env=env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert again.stderr is not None
    for line in again.stderr:
        if f"run {run_id}: released succeeded" in line:
            break
    again.send_signal(signal.SIGTERM)
    again.communicate(timeout=60)
    assert again.returncode == 0
    shown = json.loads(tether(tmp_path, "show", run_id, "--json").stdout)
    assert shown["status"] == "succeeded"
    ids = [n["node_id"] for n in shown["nodes"]]
    assert len(ids) == len(set(ids)) == 10
