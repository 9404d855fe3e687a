"""A store whose disk fills: runs pause with a reason that names the store and "no space
left", nothing recorded before is damaged, and `tether resume` finishes them once space is
freed.

SQLite: `PRAGMA max_page_count` on the store's own connection gives a real SQLITE_FULL
without a special filesystem; raising it frees the space. PostgreSQL: a private throwaway
cluster (never the shared server) whose tether database lives in a tablespace on a tmpfs
mounted for the test with a few hundred KiB to spare (its WAL on the ordinary disk, as a
data volume apart from the WAL volume); growing the mount (`remount,size=`) frees space.
Mounting needs root (the suite runs as root in CI); elsewhere the PostgreSQL test is
skipped with the reason.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.disk_agents import filler
from tests.faults.harness import REPO_ROOT, TETHER_SRC
from tests.pgcluster import PgCluster, private_root, shutdown
from tether import Runtime, Status, Store, store_from_url
from tether.control.worker import Worker
from tether.foundation.errors import StoreFull
from tether.model.records import Record, decode_log
from tether.store.postgres import migrate

RUNS = 3
NODES = 120
SIZE = 3000


async def fill_until_paused(
    store: Store, size: int = SIZE
) -> tuple[list[str], dict[str, list[Record]]]:
    """Start RUNS runs at once on `store` until its disk is full; every record the runtime
    published (each one the store acknowledged), by run."""
    published: dict[str, list[Record]] = {}
    rt = Runtime(store)
    rt.events.on_record(lambda run_id, seq, record: published.setdefault(run_id, []).append(record))
    outcomes = await asyncio.gather(
        *(rt.start(filler, {"nodes": NODES, "size": size}, run_id=f"full{k}") for k in range(RUNS))
    )
    for outcome in outcomes:
        assert outcome.status is Status.PAUSED, (outcome.status, outcome.reason)
    return [o.reason for o in outcomes], published


async def check_history(store: Store, published: dict[str, list[Record]]) -> dict[str, list[bytes]]:
    """Every record acknowledged before the disk filled is in the log, decodes, in order,
    and nothing else is (the pause record, if it found room, excepted); the run replays."""
    logs = {}
    for k in range(RUNS):
        run_id = f"full{k}"
        rows = await store.log.read_all(run_id)
        records = decode_log(run_id, rows)
        acked = published[run_id]
        assert records[: len(acked)] == acked
        extra = [r.WhichOneof("body") for r in records[len(acked) :]]
        assert extra in ([], ["run_paused"]), extra
        last = records[-1].WhichOneof("body")
        print(f"\n{run_id}: {len(records)} records, the last {last}")
        graph = await Runtime(store).load(run_id)  # replays: no hole, no node twice
        assert graph.completed_count < NODES
        logs[run_id] = rows
    return logs


def cli_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    env["PYTHONPATH"] = os.pathsep.join([TETHER_SRC, REPO_ROOT])
    return env


def tether_resume(url: str, run_id: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", "resume", run_id, "--db", url, "--quiet"],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


async def resume_all_with_the_cli(url: str, logs: dict[str, list[bytes]]) -> None:
    for run_id in logs:
        done = await asyncio.to_thread(tether_resume, url, run_id)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "status: succeeded" in done.stdout, done.stdout
    async with store_from_url(url) as store:
        for run_id, before in logs.items():
            rows = await store.log.read_all(run_id)
            assert rows[: len(before)] == before  # the history kept, byte for byte
            outcome = await Runtime(store).outcome(run_id)
            assert outcome.status is Status.SUCCEEDED
            assert outcome.graph.completed_count == NODES  # each node recorded once


async def still_full_resume(store: Store, run_id: str, logs: dict[str, list[bytes]]) -> None:
    try:
        again = await Runtime(store).resume(run_id)
        assert again.status is Status.PAUSED and "no space left" in again.reason, again.reason
    except StoreFull as exc:
        assert "no space left" in str(exc)
    row = await store.runs.get(run_id)
    assert row is not None and row.status is Status.PAUSED and row.owner is None, row
    assert row.reason is not None and "no space left" in row.reason
    rows = await store.log.read_all(run_id)
    assert rows[: len(logs[run_id])] == logs[run_id]
    logs[run_id] = rows


# -- SQLite ------------------------------------------------------------------------------


async def pragma(store: Store, statement: str) -> Any:
    db = store._db  # type: ignore[attr-defined]
    return await db.call(lambda: db.conn.execute(statement).fetchone()[0])


# 3,000-byte records take overflow pages of their own: the pause record still fits in a
# leaf page. 100-byte records fill the leaf pages themselves: then not even the pause fits,
# and the run is paused by its runs row alone (an update in place).
@pytest.mark.parametrize("size", [SIZE, 100], ids=["large-records", "small-records"])
async def test_sqlite_full_pauses_runs_keeps_history_and_resume_finishes(
    tmp_path: Path, size: int
) -> None:
    url = f"sqlite:///{tmp_path / 'tether.db'}"
    async with store_from_url(url) as store:
        pages = await pragma(store, "PRAGMA page_count")
        # Room for about a third of what the runs would write: they fill it together.
        room = RUNS * NODES * size // 3 // await pragma(store, "PRAGMA page_size")
        await pragma(store, f"PRAGMA max_page_count = {pages + room}")
        reasons, published = await fill_until_paused(store, size)
        for reason in reasons:
            assert reason.startswith(f"store {url}: no space left (database or disk is full)")
        for k in range(RUNS):
            row = await store.runs.get(f"full{k}")
            assert row is not None and row.status is Status.PAUSED
            assert row.reason is not None and "no space left" in row.reason
        logs = await check_history(store, published)
        assert await pragma(store, "PRAGMA integrity_check") == "ok"

        # Still full: a resume pauses again (or is refused, if not even its RunResumed
        # fits), naming why; the run stays paused, unowned, its history intact.
        await still_full_resume(store, "full0", logs)

        # Space freed: this process's store goes on (one run resumed here) ...
        await pragma(store, "PRAGMA max_page_count = 1073741823")
        here = await Runtime(store).resume("full0")
        assert here.status is Status.SUCCEEDED, here.reason
    # ... and `tether resume` (a new process, a new connection) finishes the others.
    del logs["full0"]
    await resume_all_with_the_cli(url, logs)


async def test_sqlite_full_under_a_worker_pauses_its_runs_and_the_worker_goes_on(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'tether.db'}"
    async with store_from_url(url) as store:
        runtime = Runtime(store, owner="w1")
        run_ids = [
            await runtime.submit(filler, {"nodes": NODES, "size": SIZE}, run_id=f"full{k}")
            for k in range(RUNS)
        ]
        room = RUNS * NODES * SIZE // 3 // await pragma(store, "PRAGMA page_size")
        pages = await pragma(store, "PRAGMA page_count")
        await pragma(store, f"PRAGMA max_page_count = {pages + room}")
        worker = Worker(runtime, lease_ttl=30, poll=0.05)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(worker.run())
            for _ in range(3000):  # until each run is released paused (a 60 s bound)
                if worker.counts["paused"] + worker.counts["failed"] >= RUNS:
                    break
                await asyncio.sleep(0.02)
            worker.stop()
        assert worker.counts["paused"] == RUNS and not worker.counts["failed"], worker.counts
        for run_id in run_ids:
            row = await store.runs.get(run_id)
            assert row is not None and row.status is Status.PAUSED and row.owner is None
            assert row.reason is not None and "no space left" in row.reason
        await pragma(store, "PRAGMA max_page_count = 1073741823")
        for run_id in run_ids:
            assert (await Runtime(store).resume(run_id)).status is Status.SUCCEEDED


async def test_the_http_api_answers_507_on_a_full_store_naming_no_path(tmp_path: Path) -> None:
    import httpx

    from tests.server.kit import TOKEN, running

    url = f"sqlite:///{tmp_path / 'tether.db'}"
    async with store_from_url(url) as store:
        pages = await pragma(store, "PRAGMA page_count")
        await pragma(store, f"PRAGMA max_page_count = {pages + 2}")
        await fill_until_paused(store, 100)  # leaf pages full: not even a pause fits
        agent = "tests.disk_agents:filler"
        async with (
            running(store, agents=(agent,)) as (server_url, _),
            httpx.AsyncClient(
                base_url=server_url, headers={"Authorization": f"Bearer {TOKEN}"}
            ) as http,
        ):
            # An input of 20 kB: its RunStarted needs pages of its own, and none are left.
            body = {"agent": agent, "input": {"nodes": 1, "size": 1, "pad": "x" * 20_000}}
            response = await http.post("/v1/runs", json=body)
        assert response.status_code == 507, response.text
        error = response.json()["error"]
        assert error["type"] == "store_full"
        assert error["message"].startswith("the store has no space left (request ")
        assert str(tmp_path) not in response.text


# -- PostgreSQL: a private cluster, its tether database on a small filesystem ------------


def mount_tmpfs(where: Path, size_k: int) -> None:
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_k}k,mode=0700", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs for the PostgreSQL full-disk test: {done.stderr}")
    shutil.chown(where, "postgres", "postgres")


def resize(where: Path, size_k: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size_k}k", str(where)], check=True)


def used_k(where: Path) -> int:
    usage = shutil.disk_usage(where)
    return usage.used // 1024


class SmallDiskCluster:
    def __init__(self, cluster: PgCluster, disk: Path) -> None:
        self.cluster = cluster
        self.disk = disk
        self.url = cluster.url_of("tether_full")


@pytest.fixture
def small_disk_cluster() -> Iterator[SmallDiskCluster]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root")
    with private_root() as root:
        disk = root / "tiny"
        disk.mkdir()
        mount_tmpfs(disk, 64 * 1024)
        cluster = PgCluster(root).initdb()
        try:
            cluster.start()
            asyncio.run(create_on_disk(cluster, disk))
            yield SmallDiskCluster(cluster, disk)
        finally:
            shutdown(cluster)
            subprocess.run(["umount", "-l", str(disk)], check=False)


async def create_on_disk(cluster: PgCluster, disk: Path) -> None:
    conn = await asyncpg.connect(cluster.url, timeout=10)
    try:
        await conn.execute(f"CREATE TABLESPACE tiny LOCATION '{disk}'")
        await conn.execute("CREATE DATABASE tether_full TABLESPACE tiny")
    finally:
        await conn.close()
    await migrate(cluster.url_of("tether_full"))


@pytest.mark.parametrize("size", [SIZE, 100], ids=["large-records", "small-records"])
async def test_postgres_disk_full_pauses_runs_keeps_history_and_resume_finishes(
    small_disk_cluster: SmallDiskCluster, size: int
) -> None:
    c = small_disk_cluster
    # The migrated, empty database's size plus room for about a third of what the runs write.
    # (At least 64 KiB: a database that cannot even create the runs refuses them at once.)
    room_k = max(64, RUNS * NODES * size // 3 // 1024)
    resize(c.disk, used_k(c.disk) + room_k)
    async with store_from_url(c.url) as store:
        reasons, published = await fill_until_paused(store, size)
        where = f"127.0.0.1:{c.cluster.port}/tether_full"
        for reason in reasons:
            assert reason.startswith(f"store postgresql {where}: no space left ("), reason
            assert "No space left on device" in reason, reason
        statuses = {}
        for k in range(RUNS):
            row = await store.runs.get(f"full{k}")
            assert row is not None
            statuses[row.run_id] = (row.status.value, row.owner)
        print(f"\nrows after the fill: {statuses}; df: {used_k(c.disk)} KiB used")
        logs = await check_history(store, published)
        await still_full_resume(store, "full0", logs)
    resize(c.disk, 64 * 1024)
    await resume_all_with_the_cli(c.url, logs)
