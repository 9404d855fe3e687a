"""Scenarios 2-5: SIGTERM during a fan-out, a PostgreSQL restart, a zombie, load with kills."""

from __future__ import annotations

import random
import signal
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from tests.faults.agent import open_gate
from tests.faults.harness import WorkerProc, check, q, submit, sync, wait_all_finished
from tests.faults.test_kill import wait_for
from tests.pgcluster import PgCluster
from tether.model.records import decode_log


def inputs_of(prefix: str, n: int, **shape: Any) -> dict[str, dict[str, Any]]:
    return {f"{prefix}{i}": {"seed": i, **shape} for i in range(n)}


def count(url: str, query: str, *args: Any) -> int:
    return int(q(url, query, *args)[0][0])


def test_sigterm_during_a_wide_fan_out(fault_db: str, tmp_path: Path) -> None:
    url, width = fault_db, 12
    gate = str(tmp_path / "gate")
    inputs = inputs_of("fan", 4, width=width, depth=2, delay=0.0, gate=gate)
    first = WorkerProc(url, tmp_path, ttl=5).wait_ready()
    sync(lambda: submit(url, inputs))
    # Every run's first layer is in flight, held at the gate: root recorded, `width` work
    # nodes started, none finished, so no join can have been launched.
    wait_for(lambda: count(url, "SELECT count(*) FROM effects") >= 4 * (1 + width), 120)
    # A poll longer than the test: the second worker can only take the runs up if
    # NOTIFY (sent by the drain's release) wakes it.
    second = WorkerProc(url, tmp_path, ttl=5, poll=3600).wait_ready()
    term_at = q(url, "SELECT clock_timestamp()")[0][0]
    first.signal(signal.SIGTERM)
    # The handshake: the worker logs the drain once it stopped launching nodes; only
    # then may the held nodes finish (else the first could launch a join before it).
    wait_for(lambda: ": draining " in first.log, 60)
    t0 = time.monotonic()
    open_gate(gate)
    code = first.wait(60)
    drained_in = time.monotonic() - t0
    assert code == 0, first.log
    wait_all_finished(url, 120)
    assert second.stop() == 0, second.log
    checked = sync(lambda: check(url, inputs))

    late = count(url, "SELECT count(*) FROM effects WHERE pid = $1 AND at > $2", first.pid, term_at)
    assert late == 0, "the draining worker started nodes after SIGTERM"
    by_first = q(url, "SELECT key, count(*) FROM effects WHERE pid = $1 GROUP BY key", first.pid)
    assert len(by_first) == 4 * (1 + width)
    # Its in-flight nodes finished and were recorded: nobody ran them again.
    again = count(
        url,
        "SELECT count(*) FROM effects WHERE pid <> $1 AND key = ANY($2::text[])",
        first.pid,
        [r[0] for r in by_first],
    )
    assert again == 0
    assert first.log.count("released paused (drain)") == 4
    failovers = []
    for run_id in inputs:
        rows = q(url, "SELECT record FROM run_log WHERE run_id = $1 ORDER BY seq", run_id)
        records = decode_log(run_id, [r[0] for r in rows])
        paused = next(r for r in records if r.WhichOneof("body") == "run_paused")
        resumed = [r for r in records if r.WhichOneof("body") == "run_resumed"][-1]
        assert resumed.run_resumed.owner == second.owner
        failovers.append((resumed.at_us - paused.at_us) / 1e6)
    print(
        f"\n[sigterm] {checked.line()}\n[sigterm] drain took {drained_in:.2f}s once the "
        f"held nodes could finish; {len(by_first)} in-flight nodes finished and recorded, 0 "
        f"started after SIGTERM; failover (pause record -> resumed on the other worker, "
        f"woken by NOTIFY, its poll 3600s): median "
        f"{statistics.median(failovers) * 1000:.0f} ms, max {max(failovers) * 1000:.0f} ms"
    )


def noticed(log: str) -> int:
    """How many times a worker's log says it retried (or gave up on) the database."""
    return log.count("retrying") + log.count("leaving it to its lease")


def test_postgres_restarts_in_the_middle_of_runs(
    fault_cluster: PgCluster, fault_db: str, tmp_path: Path
) -> None:
    url = fault_db
    gate = str(tmp_path / "gate")
    inputs = inputs_of("pg", 40, width=5, depth=4, delay=0.02, gate=gate)
    workers = [WorkerProc(url, tmp_path, ttl=2).wait_ready() for _ in range(2)]
    sync(lambda: submit(url, inputs))
    # Each worker holds 8 runs (its concurrency), their first layers in flight at the gate.
    wait_for(lambda: count(url, "SELECT count(*) FROM effects") >= 16 * (1 + 5), 120)
    before = count(url, "SELECT count(*) FROM run_log")
    t0 = time.monotonic()
    fault_cluster.stop()  # the session's private cluster, never the shared server
    # The held nodes finish while the database is down: their appends wait for it (as
    # do lease renewals). Started again once a worker noticed, not after some time.
    open_gate(gate)
    wait_for(lambda: any(noticed(w.log) for w in workers), 120)
    fault_cluster.start_again()
    restart_s = time.monotonic() - t0
    wait_all_finished(url, 180)
    assert all(w.alive() for w in workers), "a worker died with the database"
    logs = "".join(w.log for w in workers)
    for w in workers:
        assert w.stop() == 0, w.log
    checked = sync(lambda: check(url, inputs))
    assert before < checked.records, "the restart came after the work"
    retried = noticed(logs)
    print(
        f"\n[pg restart] down and up again in {restart_s:.1f}s with {before} of {checked.records} "
        f"records written; {retried} retries logged; both workers survived\n"
        f"[pg restart] {checked.line()}"
    )


def test_a_zombie_worker_is_fenced_off(fault_db: str, tmp_path: Path) -> None:
    url = fault_db
    gate = str(tmp_path / "gate")
    inputs = inputs_of("z", 6, width=4, depth=3, delay=0.0, gate=gate)
    zombie = WorkerProc(url, tmp_path, ttl=2).wait_ready()
    sync(lambda: submit(url, inputs))
    # Every run's first layer is in flight on the zombie, held at the gate: none of its
    # runs can finish before it is stopped, whatever the machine's load.
    wait_for(lambda: count(url, "SELECT count(*) FROM effects") >= 6 * (1 + 4), 120)
    zombie.signal(signal.SIGSTOP)
    try:
        successor = WorkerProc(url, tmp_path, ttl=2).wait_ready()
        # The zombie's leases expire (2 s) and the successor claims every run.
        claimed = "SELECT count(*) FROM runs WHERE owner = $1 AND epoch >= 2"
        wait_for(lambda: count(url, claimed, successor.owner) == len(inputs), 120)
    finally:
        open_gate(gate)
        zombie.signal(signal.SIGCONT)
    wait_all_finished(url, 120)
    assert zombie.alive(), zombie.log
    assert zombie.stop() == 0 and successor.stop() == 0
    log = zombie.log
    fenced = {r for r in inputs if f"run {r}: fenced off" in log}
    lost = {r for r in inputs if f"run {r}: lease lost" in log}
    expired = {r for r in inputs if f"run {r}: lease expired" in log}
    # On waking, three things race to tell it the run moved on: its own clock (the lease
    # ran out while it slept), its first renewal, or an append the database fences off.
    # Whichever wins, the audit below proves no stale append landed.
    assert fenced | lost | expired == set(inputs), log
    checked = sync(lambda: check(url, inputs))
    print(
        f"\n[zombie] {len(fenced)} runs stopped by a fenced append, "
        f"{len(lost - fenced)} by a lost lease, {len(expired - lost - fenced)} by its own "
        f"clock; no stale append landed\n[zombie] {checked.line()}"
    )


MAX_KILLS = 12


@pytest.mark.timeout(1200)  # a bound on a hang: 33 s idle, 80 s on a loaded machine
@pytest.mark.parametrize("n_runs", [500])
def test_load_with_workers_killed_and_restarted(fault_db: str, tmp_path: Path, n_runs: int) -> None:
    url, rng = fault_db, random.Random(11)
    shapes = [(w, d) for w in range(3, 10) for d in range(2, 6) if 20 <= 1 + d * (w + 1) <= 50]
    inputs = {}
    for i in range(n_runs):
        width, depth = rng.choice(shapes)
        inputs[f"load{i}"] = {"seed": i, "width": width, "depth": depth, "delay": 0.0}
    workers = [WorkerProc(url, tmp_path, ttl=2, concurrency=16).wait_ready() for _ in range(4)]
    t0 = time.monotonic()
    sync(lambda: submit(url, inputs))
    kills = 0
    unfinished = "SELECT count(*) FROM runs WHERE status <> 'succeeded'"
    # A kill a second while runs remain, at most MAX_KILLS: a slow machine gets the same
    # faults, not more of them, and then all the time it needs to finish.
    while count(url, unfinished) and kills < MAX_KILLS:
        time.sleep(1.0)  # the kill cadence
        i = rng.randrange(len(workers))
        workers[i].kill()
        kills += 1
        workers[i] = WorkerProc(url, tmp_path, ttl=2, concurrency=16).wait_ready()
    wait_all_finished(url, 300)
    took = time.monotonic() - t0
    for w in workers:
        assert w.stop() == 0, w.log
    checked = sync(lambda: check(url, inputs))
    print(
        f"\n[load] 4 workers, {n_runs} runs of 20-50 nodes in {took:.1f}s "
        f"({checked.nodes / took:.0f} nodes/s) with {kills} workers killed and restarted\n"
        f"[load] {checked.line()}"
    )
