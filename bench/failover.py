"""Failover after `kill -9` as a function of the lease TTL, with real worker processes.

Run from the repository root: `PYTHONPATH=src:. python bench/failover.py [ADMIN_URL]`.
For each TTL: worker A claims a run whose nodes take 30 s, worker B waits (default
poll, 1 s), A is SIGKILLed; failover is the time from the kill to B's RunResumed record.
It is bounded below by what remains of A's lease and above by TTL + poll.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import asyncpg

from tests.faults.harness import WorkerProc, prepare, q, submit, sync
from tether.model.records import Record, decode_log
from tether.store.postgres import migrate

ADMIN_URL = sys.argv[1] if len(sys.argv) > 1 else "postgresql://postgres@127.0.0.1:5432/postgres"
DB = "tether_bench_failover"
URL = ADMIN_URL.rsplit("/", 1)[0] + "/" + DB
TTLS = (2.0, 5.0)
REPEATS = 3


async def admin(sql: str) -> None:
    conn = await asyncpg.connect(ADMIN_URL)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def wait_until(probe: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not probe():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.01)


def one(ttl: float, n: int, logs: Path) -> float:
    run_id = f"ttl{ttl:g}-{n}"
    first = WorkerProc(URL, logs, ttl=ttl, poll=1.0).wait_ready()
    sync(lambda: submit(URL, {run_id: {"seed": n, "width": 2, "depth": 1, "delay": 30.0}}))
    wait_until(lambda: q(URL, "SELECT 1 FROM effects WHERE run_id = $1", run_id), 10)
    second = WorkerProc(URL, logs, ttl=ttl, poll=1.0).wait_ready()
    killed_us = time.time_ns() // 1000
    first.kill()
    log = "SELECT record FROM run_log WHERE run_id = $1 ORDER BY seq"

    def resumes() -> list[Record]:
        rows = decode_log(run_id, [r[0] for r in q(URL, log, run_id)])
        return [r for r in rows if r.HasField("run_resumed")]

    wait_until(lambda: len(resumes()) >= 2, ttl + 10)
    resumed = resumes()
    second.kill()
    # Out of the way of the next measurement (its lease would expire into it).
    q(URL, "UPDATE runs SET status = 'cancelled' WHERE run_id = $1", run_id)
    assert len(resumed) == 2, "the run was taken over more than once"
    return (resumed[-1].at_us - killed_us) / 1e6


def main() -> None:
    asyncio.run(admin(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)"))
    asyncio.run(admin(f"CREATE DATABASE {DB}"))
    try:
        asyncio.run(migrate(URL))
        prepare(URL)
        with tempfile.TemporaryDirectory() as logs:
            print("failover after kill -9 (kill -> RunResumed on the other worker), s")
            for ttl in TTLS:
                times = [one(ttl, n, Path(logs)) for n in range(REPEATS)]
                print(
                    f"lease TTL {ttl:g}s (heartbeat {ttl / 3:.2f}s, poll 1s): median "
                    f"{statistics.median(times):.2f}, min {min(times):.2f}, max {max(times):.2f}"
                )
    finally:
        asyncio.run(admin(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)"))


if __name__ == "__main__":
    main()
