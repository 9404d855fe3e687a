"""Chaos at scale: seeded random faults against several workers running a mix of agents.

Each lane has a private PostgreSQL cluster, a TCP proxy in front of it (the workers'
only way to the database) and three `tether worker` processes, reused across trials.
A trial submits a few runs of the fault agent (fan-out, joins, a retried node, sub-agent
runs) and, at random moments, SIGKILLs, SIGTERMs or SIGSTOPs (then SIGCONTs) a worker,
restarts PostgreSQL (fast or immediate) or cuts every connection at the proxy. Then,
from the raw rows (`run_log`, the insert-trigger audit, the side-effect table), it
checks each run: every node recorded exactly once, no seq gap, the result of an
uninterrupted run, no append admitted at a stale epoch.

CI runs `TRIALS` trials; `TETHER_CHAOS_TRIALS=500 pytest tests/faults -k chaos` runs
500 and prints the same one-line summary. `TETHER_FAULTS_SEED` picks the seed.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.faults.conftest import admin, new_fault_db
from tests.faults.harness import Checked, WorkerProc, check, q, submit, sync
from tests.faults.proxy import TcpProxy
from tests.pgcluster import PgCluster, open_cluster, wait_connectable
from tether.store.postgres import migrate

TRIALS = int(os.environ.get("TETHER_CHAOS_TRIALS", "24"))
LANES = 4
WORKERS = 3
TTL = 1.0
FAULTS = ("sigkill", "sigterm", "sigstop", "pg_restart", "cut")


@dataclass
class Tally:
    """What the trials did and found, summed over lanes."""

    trials: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    checked: Checked = field(default_factory=Checked)
    violations: list[str] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        self.trials += other.trials
        self.faults.update(other.faults)
        self.violations += other.violations
        for name in ("runs", "children", "nodes", "executions", "reexecuted", "records"):
            setattr(self.checked, name, getattr(self.checked, name) + getattr(other.checked, name))
        self.checked.resumes += other.checked.resumes
        self.checked.max_epoch = max(self.checked.max_epoch, other.checked.max_epoch)


class Lane:
    """A private cluster, a proxy in front of it, workers that reach it only through it."""

    def __init__(self, cluster: PgCluster, url: str, logs: Path, rng: random.Random) -> None:
        self.cluster, self.url, self.logs, self.rng = cluster, url, logs, rng
        self.proxy = TcpProxy(cluster.port).start()
        self.proxied = url.replace(f":{cluster.port}/", f":{self.proxy.port}/")
        self.workers = [self._worker() for _ in range(WORKERS)]
        self.draining: list[WorkerProc] = []
        self.stopped: dict[WorkerProc, float] = {}  # SIGSTOPped worker -> when to SIGCONT
        self.tally = Tally()

    def _worker(self) -> WorkerProc:
        return WorkerProc(self.proxied, self.logs, ttl=TTL, grace=5).wait_ready()

    def fault(self, kind: str) -> None:
        self.tally.faults[kind] += 1
        if kind == "pg_restart":
            self.cluster.restart(self.rng.choice(["fast", "immediate"]))
            return
        if kind == "cut":
            self.proxy.cut()
            return
        running = [w for w in self.workers if w not in self.stopped]
        w = self.rng.choice(running)
        if kind == "sigstop":
            w.signal(signal.SIGSTOP)
            # Stopped for up to 2.5 lease TTLs: often long enough to be taken over.
            self.stopped[w] = time.monotonic() + self.rng.uniform(0.2, 2.5) * TTL
            return
        self.workers.remove(w)
        if kind == "sigkill":
            w.kill()
        else:
            w.signal(signal.SIGTERM)
            self.draining.append(w)
        self.workers.append(self._worker())

    def wake(self, *, all_of_them: bool = False) -> None:
        """SIGCONT the stopped workers whose time has come (all of them, waiting if told)."""
        for w, at in list(self.stopped.items()):
            if all_of_them:
                time.sleep(max(0.0, at - time.monotonic()))
            if all_of_them or at <= time.monotonic():
                w.signal(signal.SIGCONT)
                del self.stopped[w]

    def trial(self, n: int) -> None:
        rng = self.rng
        inputs = {
            f"c{n}-r{i}": {
                "seed": rng.randrange(1 << 30),
                "width": rng.randint(2, 4),
                "depth": rng.randint(1, 3),
                "delay": rng.choice([0.0, 0.005, 0.02]),
                "flaky": rng.random() < 0.5,
                "sub": rng.random() < 0.5,
            }
            for i in range(rng.randint(2, 4))
        }
        sync(lambda: submit(self.url, inputs))
        for _ in range(rng.randint(1, 4)):
            time.sleep(rng.uniform(0, 0.4))  # a random moment, not a synchronisation
            self.wake()
            self.fault(rng.choice(FAULTS))
        self.wake(all_of_them=True)
        self.tally.trials += 1
        try:
            wait_finished(self.url, list(inputs), 180)
            self.tally.add(Tally(checked=sync(lambda: check(self.url, inputs))))
        except AssertionError as exc:
            self.tally.violations.append(f"trial {n}: {exc}")
        for w in list(self.draining):
            code = w.wait(180)
            if code != 0:
                self.tally.violations.append(f"trial {n}: drained worker exited {code}\n{w.log}")
            self.draining.remove(w)

    def close(self) -> None:
        self.wake(all_of_them=True)
        for w in self.workers + self.draining:
            if w.wait(0) is None and w.stop() != 0:
                self.tally.violations.append(f"worker {w.pid} did not drain cleanly\n{w.log}")
        self.proxy.close()


def wait_finished(url: str, run_ids: list[str], timeout: float) -> None:
    query = "SELECT count(*) FROM runs WHERE run_id = ANY($1::text[]) AND status = 'succeeded'"
    deadline = time.monotonic() + timeout
    while q(url, query, run_ids)[0][0] < len(run_ids):
        if time.monotonic() > deadline:
            rows = q(url, "SELECT * FROM runs WHERE run_id = ANY($1::text[])", run_ids)
            raise AssertionError(f"runs unfinished after {timeout}s: {[dict(r) for r in rows]}")
        time.sleep(0.05)


def lane(seed: int, trials: range, logs: Path) -> Tally:
    rng = random.Random(f"chaos-{seed}-{trials.start}")
    with open_cluster() as cluster:
        sync(lambda: admin(cluster, "CREATE DATABASE chaos_template"))
        sync(lambda: migrate(cluster.url_of("chaos_template")))
        url = new_fault_db(cluster, "chaos_template")
        sync(lambda: wait_connectable(url))
        chaos = Lane(cluster, url, logs, rng)
        try:
            for n in trials:
                chaos.trial(n)
        finally:
            chaos.close()
        return chaos.tally


# A bound on a hang, not a timing target: a trial has taken 12 s on a loaded 2-core machine.
@pytest.mark.timeout(max(600, TRIALS * 30))
def test_chaos(tmp_path: Path) -> None:
    seed = int(os.environ.get("TETHER_FAULTS_SEED", "7"))
    lanes = min(LANES, TRIALS)
    per_lane = -(-TRIALS // lanes)
    t0 = time.monotonic()
    with ThreadPoolExecutor(lanes) as pool:
        futures = [
            pool.submit(lane, seed, range(i * per_lane, min(TRIALS, (i + 1) * per_lane)), tmp_path)
            for i in range(lanes)
        ]
        total = Tally()
        for f in futures:
            total.add(f.result())
    c = total.checked
    faults = ", ".join(f"{k} {total.faults[k]}" for k in FAULTS)
    print(
        f"\n[chaos] seed {seed}: {total.trials} trials in {time.monotonic() - t0:.0f}s; "
        f"faults {sum(total.faults.values())} ({faults}); {c.runs} runs + {c.children} "
        f"sub-agent runs, {c.nodes} nodes, {c.reexecuted} re-executions, {c.resumes} "
        f"resumptions, max epoch {c.max_epoch}; violations {len(total.violations)}"
    )
    assert not total.violations, "\n\n".join(total.violations[:5])
    assert total.trials == TRIALS
    if TRIALS >= 16:  # enough trials that every kind of fault and a takeover happened
        assert all(total.faults[k] for k in FAULTS), total.faults
        assert c.reexecuted > 0 and c.max_epoch >= 2, c
