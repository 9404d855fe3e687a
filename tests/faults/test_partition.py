"""A network partition between one worker and PostgreSQL (packets dropped, nothing closed).

Two workers reach the database each through a proxy of its own. Mid-run the proxy of
the run's owner (A) blackholes its traffic: A's statements hang with no error, as on a
real partition; the other worker (B) is unaffected.
A must stop working on the run once its lease has run out (it cannot renew it), B must
take the run over after the lease TTL, and when the partition heals, the statements A
sent meanwhile reach the server late and must be refused by the epoch fence.

Takeover time: from the partition to B's claim, both on the database's clock.
`TETHER_PARTITION_TRIALS` sets the number of trials (p50/p99 printed).
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.faults.agent import open_gate
from tests.faults.harness import WorkerProc, check, q, submit, sync, wait_all_finished
from tests.faults.proxy import TcpProxy
from tests.faults.test_kill import wait_for
from tests.pgcluster import PgCluster

TRIALS = int(os.environ.get("TETHER_PARTITION_TRIALS", "4"))
TTL = 1.0


def db_now(url: str) -> float:
    return float(q(url, "SELECT extract(epoch FROM clock_timestamp())")[0][0])


def logged_at(log: str, needle: str) -> float | None:
    """The wall-clock time of the first log line containing `needle` (asctime format)."""
    for line in log.splitlines():
        if needle in line:
            stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            return stamp.timestamp()
    return None


def partition_trial(cluster: PgCluster, url: str, logs: Path, n: int) -> dict[str, Any]:
    run_id = f"part{n}"
    gate = str(logs / f"gate-{n}")
    inputs = {run_id: {"seed": n, "width": 3, "depth": 8, "delay": 0.02, "gate": gate}}
    # Each worker behind a proxy of its own: whichever claims the run is cut off.
    proxies = [TcpProxy(cluster.port).start() for _ in range(2)]
    try:
        workers = [
            WorkerProc(url.replace(f":{cluster.port}/", f":{p.port}/"), logs, ttl=TTL, poll=0.2)
            for p in proxies
        ]
        for w in workers:
            w.wait_ready()
        sync(lambda: submit(url, inputs))
        # The owner's first layer is in flight, held at the gate: the run cannot finish
        # (or even move on) before the cut, whatever the machine's load.
        effects = "SELECT count(*) FROM effects WHERE run_id = $1"
        wait_for(lambda: q(url, effects, run_id)[0][0] >= 1 + 3, 60)
        owner, epoch_a = q(url, "SELECT owner, epoch FROM runs WHERE run_id = $1", run_id)[0]
        i = [w.owner for w in workers].index(owner)
        a, b, proxy = workers[i], workers[1 - i], proxies[i]
        cut_at = db_now(url)
        proxy.blackhole()
        # A's held nodes now finish and send their appends into the partition.
        open_gate(gate)
        state = "SELECT owner, status, updated_at FROM runs WHERE run_id = $1"
        wait_for(lambda: q(url, state, run_id)[0]["owner"] == b.owner, 60)
        took_over_at = float(q(url, state, run_id)[0]["updated_at"])
        # B makes progress before the heal, so A's late statements meet a moved-on run.
        at_b = "SELECT count(*) FROM log_audit WHERE run_id = $1 AND epoch > $2"
        wait_for(lambda: q(url, at_b, run_id, epoch_a)[0][0] >= 3, 60)
        # A stops by itself (nothing can reach it to say so): its lease was not renewed.
        wait_for(lambda: f"run {run_id}: lease expired" in a.log, 60)
        proxy.heal()
        wait_all_finished(url, 120)
        assert a.stop() == 0 and b.stop() == 0, a.log + b.log
        log = a.log
        assert proxy.held_bytes > 0, "A sent nothing during the partition"
        checked = sync(lambda: check(url, inputs))
        stopped = logged_at(log, f"run {run_id}: lease expired")
        return {
            "takeover": took_over_at - cut_at,
            "a_stopped": (stopped or cut_at) - cut_at,
            "held": proxy.held_bytes,
            "reexecuted": checked.reexecuted,
        }
    finally:
        for p in proxies:
            p.close()


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


@pytest.mark.timeout(max(600, TRIALS * 60))  # a bound on a hang (a trial takes ~6 s)
def test_a_partitioned_worker_stops_and_another_takes_over(
    fault_cluster: PgCluster, fault_db: str, tmp_path: Path
) -> None:
    results = [partition_trial(fault_cluster, fault_db, tmp_path, n) for n in range(TRIALS)]
    takeover = [r["takeover"] for r in results]
    stopped = [r["a_stopped"] for r in results]
    print(
        f"\n[partition] {TRIALS} trials, lease TTL {TTL:g}s, poll 0.2s: takeover after the "
        f"partition p50 {pct(takeover, 50):.2f}s p99 {pct(takeover, 99):.2f}s (max "
        f"{max(takeover):.2f}s); the partitioned worker stopped its run p50 "
        f"{pct(stopped, 50):.2f}s p99 {pct(stopped, 99):.2f}s after it; "
        f"{sum(r['held'] for r in results)} bytes of its statements reached the server "
        f"after the heal, none admitted; {sum(r['reexecuted'] for r in results)} "
        f"re-executions"
    )
