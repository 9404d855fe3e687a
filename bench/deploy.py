"""A rolling deploy with runs in flight, played with real worker processes on PostgreSQL.

Run from the repository root: `PYTHONPATH=src:. python bench/deploy.py [ADMIN_URL]`.
Two release-1 workers execute 20 runs of `tests.deploy_agents` (5 nodes of 0.5 s, the
first staggered by 0.15 s per run); two release-2 workers start (release 2 renamed
`review` to `critique` and declares release 1 compatible for runs that have not reached
`review`); the release-1 workers get SIGTERM. Compatible runs move to the release-2
workers; `tether deploy check` (with release 2's code) then names the runs left waiting
for a `review`, and a release-1 worker started again finishes them.

Prints the handover latency of the runs that moved (SIGTERM of the old workers -> the
first node of the run started on a new worker, from the records' times), p50 and p99.
The drain is part of it: a run's in-flight node finishes before the old worker gives the
run back (up to 0.5 s, and up to 3.35 s for a run still in its staggered first node).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from bench.common import pct
from tether.engine.runtime import Runtime
from tether.model.records import decode_log, started_at_us_of
from tether.store import Status
from tether.store.postgres import PostgresStore

AGENT = "tests.deploy_agents:agent"
ROOT = Path(__file__).resolve().parent.parent
ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
# When the old workers get SIGTERM, after the runs were submitted: the runs are then at
# every node (run i's `draft` is in flight from 1.0 + 0.15 i to 1.5 + 0.15 i seconds).
SIGTERM_AFTER_S = 2.0


@dataclass
class Played:
    """What a rolling deploy did to each run."""

    run_ids: list[str]
    sigterm_us: int = 0
    # Runs left waiting for a `review` once the old workers drained, and the runs that
    # `tether deploy check` named between the phases (the test checks they are the same).
    stranded: set[str] = field(default_factory=set)
    named: set[str] = field(default_factory=set)
    check_exit: int = 0
    upgrade_refusal: str = ""
    # Runs moved to release 2 after the SIGTERM, and their handover latencies (seconds).
    moved: set[str] = field(default_factory=set)
    # Runs a release-2 worker took before the SIGTERM (compatible, and queued just then).
    early: set[str] = field(default_factory=set)
    latencies: list[float] = field(default_factory=list)
    # The part after the drain: the old worker's RunPaused (drain) -> that first node.
    handovers: list[float] = field(default_factory=list)
    # Per run: its status, the kinds of its completed nodes, how often each node id was
    # recorded, and whether any node failed.
    finished: dict[str, Status] = field(default_factory=dict)
    kinds: dict[str, list[str]] = field(default_factory=dict)
    recorded_twice: list[str] = field(default_factory=list)
    failed_nodes: list[str] = field(default_factory=list)


def _env(db: str, home: Path, release: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TETHER_")}
    path = env.get("PYTHONPATH", str(ROOT / "src"))
    env.update(
        PYTHONPATH=f"{path}:{ROOT}",
        TETHER_DATABASE_URL=db,
        TETHER_DATA_DIR=str(home / ".tether"),
        DEPLOY_RELEASE=release,
        DEPLOY_NODE_S="0.5",
        DEPLOY_STAGGER_S="0.15",
        COLUMNS="250",
    )
    return env


class Worker:
    """A `tether worker` process of one release; its log goes to a file."""

    def __init__(self, db: str, home: Path, release: str, name: str) -> None:
        self.log = home / f"worker-{name}.log"
        with self.log.open("w") as err:  # the child has its own descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tether", "worker", "--poll", "0.05", "--agent", AGENT],
                cwd=home,
                env=_env(db, home, release),
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )

    def wait_ready(self) -> Worker:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()  # the ready line is the first line
        if "ready" not in line:
            raise RuntimeError(f"worker did not start: {line!r} {self.log.read_text()}")
        return self

    def stop(self, timeout: float = 60.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.communicate(timeout=timeout)
        if self.proc.returncode != 0:
            raise RuntimeError(f"worker exited {self.proc.returncode}: {self.log.read_text()}")


def tether(db: str, home: Path, release: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=home,
        env=_env(db, home, release),
        capture_output=True,
        text=True,
        timeout=120,
    )


async def _until(probe: Callable[[], Awaitable[bool]], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not await probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not reached within {within:g}s: {what}")
        await asyncio.sleep(0.05)


async def play(db: str, home: Path, runs: int = 20) -> Played:
    """Play the rolling deploy on the (migrated, empty) database at `db`."""
    # Both releases start before the runs are submitted (a process takes seconds to start
    # on a loaded machine, and the runs' stages at the SIGTERM must not depend on that).
    # The release-1 workers claim the runs the moment they are queued; a release-2 worker
    # first reads and checks a run of another version, so it seldom gets one before the
    # SIGTERM (it may: the run is compatible), and such runs are not counted as moved.
    old = [Worker(db, home, "1", f"v1-{n}") for n in range(2)]
    new = [Worker(db, home, "2", f"v2-{n}") for n in range(2)]
    again: Worker | None = None
    try:
        for w in [*old, *new]:
            w.wait_ready()
        async with PostgresStore(db) as store:
            runtime = Runtime(store)
            ids = [await runtime.submit(AGENT, {"i": i}) for i in range(runs)]
            played = Played(ids)
            await asyncio.sleep(SIGTERM_AFTER_S)
            played.sigterm_us = time.time_ns() // 1000
            for w in old:
                w.proc.send_signal(signal.SIGTERM)
            for w in old:
                w.stop()

            async def settled() -> bool:
                played.stranded = set()
                for run_id in ids:
                    info = await store.runs.get(run_id)
                    assert info is not None
                    if info.status is Status.SUCCEEDED:
                        continue
                    graph = await runtime.load(run_id)
                    if info.owner is None and graph.pending_kinds() == ["review"]:
                        played.stranded.add(run_id)
                        continue
                    return False
                return True

            await _until(settled, 60, "every run finished or waits for a review")
            check = tether(db, home, "2", "deploy", "check", AGENT, "--json")
            played.check_exit = check.returncode
            played.named = {r["run_id"] for r in json.loads(check.stdout)["runs"]}
            if played.stranded:
                first = min(played.stranded)
                refused = tether(db, home, "2", "runs", "upgrade", first, "--to", "2")
                # CLI errors are one line on stderr.
                played.upgrade_refusal = f"{refused.returncode}: {refused.stderr.strip()}"

            again = Worker(db, home, "1", "v1-again").wait_ready()

            async def all_done() -> bool:
                rows = await store.runs.list(status=Status.SUCCEEDED, limit=runs)
                return len(rows) == runs

            await _until(all_done, 60, "every run succeeded")
            await _read_back(store, played)
    finally:
        for w in [*old, *new, *([again] if again else [])]:
            if w.proc.poll() is None:
                w.stop()
    return played


async def _read_back(store: PostgresStore, played: Played) -> None:
    for run_id in played.run_ids:
        records = decode_log(run_id, await store.log.read_all(run_id))
        seen: dict[str, int] = {}
        moved_at = None
        paused_at = 0
        kinds = []
        for r in records:
            body = r.WhichOneof("body")
            if body == "node_completed":
                seen[r.node_completed.node_id] = seen.get(r.node_completed.node_id, 0) + 1
                kinds.append(r.node_completed.kind)
            elif body == "node_failed":
                played.failed_nodes.append(f"{run_id}/{r.node_failed.node_id}")
            elif body == "run_paused" and moved_at is None:
                paused_at = r.at_us
            elif body == "run_resumed" and r.run_resumed.agent_version == "2":
                if r.at_us < played.sigterm_us:
                    played.early.add(run_id)
                elif moved_at is None:
                    moved_at = r.at_us
            elif body == "run_finished":
                played.finished[run_id] = Status.from_pb(r.run_finished.status)
        played.kinds[run_id] = kinds
        played.recorded_twice += [f"{run_id}/{n}" for n, count in seen.items() if count > 1]
        if moved_at is not None:
            played.moved.add(run_id)
            # (a slim record keeps its start as took_us before its finish: started_at_us_of)
            first = min(
                started
                for r in records
                if r.WhichOneof("body") == "node_completed"
                and (started := started_at_us_of(r.node_completed)) >= moved_at
            )
            played.latencies.append((first - played.sigterm_us) / 1e6)
            played.handovers.append((first - paused_at) / 1e6)


async def _admin(url: str, sql: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def main(admin_url: str) -> None:
    name = "tether_bench_deploy"
    url = admin_url.rsplit("/", 1)[0] + "/" + name
    await _admin(admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    await _admin(admin_url, f"CREATE DATABASE {name}")
    try:
        async with PostgresStore(url):  # migrated
            pass
        with tempfile.TemporaryDirectory() as home:
            played = await play(url, Path(home))
    finally:
        await _admin(admin_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    lat = played.latencies
    print(
        f"rolling deploy, {len(played.run_ids)} runs: {len(played.moved)} moved to release 2 "
        f"after the SIGTERM ({len(played.early)} before it), "
        f"{len(played.stranded)} waited for release 1 (deploy check named {len(played.named)})"
    )
    if lat:
        print(
            f"handover latency (SIGTERM -> first node on a new worker): "
            f"p50 {pct(lat, 0.5):.3f}s  p99 {pct(lat, 0.99):.3f}s  max {max(lat):.3f}s  "
            f"min {min(lat):.3f}s  (n={len(lat)})"
        )
    if played.handovers:
        h = played.handovers
        print(
            f"of which after the drain (old worker's RunPaused -> first node on a new worker): "
            f"p50 {pct(h, 0.5):.3f}s  p99 {pct(h, 0.99):.3f}s  max {max(h):.3f}s"
        )
    bad = played.failed_nodes + played.recorded_twice
    print("every run succeeded, each node recorded once" if not bad else f"PROBLEMS: {bad}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else ADMIN_URL))
