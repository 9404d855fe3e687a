"""Workers: records/s with 1, 2 and 4 `tether worker` processes on one PostgreSQL.

1,000 short runs (chains of no-op nodes) are recorded first, held (paused, unclaimable);
the workers start, each in its own process with `--concurrency 1000/N`; once every one
said it is ready, one UPDATE queues all the runs and wakes them, and the clock runs until
every run has succeeded (the runs table, polled). Records are the node records plus each
run's resumed and finished records. CPU seconds of the workers (their own rusage) and of
every PostgreSQL server process (from /proc) in that window say which side caps the rate.
The floor is the same rows inserted by the bench process alone: 64-row bare INSERTs, back
to back through the store's pool, i.e. what the server commits when no Python runs nodes.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

from bench.common import Line, Settings, bare_insert_many, open_pg, pg_pool
from tether.engine.runtime import Runtime
from tether.store.base import Status

ROOT = Path(__file__).resolve().parent.parent
PROCESSES = (1, 2, 4)
NODES = 5


def _cpu_s(pids: set[int] | None = None) -> float:
    """CPU seconds used so far by the processes `pids`, or by every process named postgres."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or (pids is not None and int(entry) not in pids):
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                name, _, rest = f.read().rpartition(")")
            if pids is None and "postgres" not in name:
                continue
            fields = rest.split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            continue
    return total / tick


async def _one(settings: Settings, processes: int, runs: int) -> tuple[float, float, float, int]:
    """(wall s, worker CPU s, PostgreSQL CPU s, records) for `runs` runs on `processes`."""
    store = await open_pg(settings)
    try:
        rt = Runtime(store)
        for _ in range(runs):
            await rt.create("bench.agents:chain", NODES, status=Status.PAUSED)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
        cmd = [sys.executable, "-m", "tether", "--db", settings.pg_url, "worker"]
        # A long lease: on a loaded machine a worker busy with hundreds of runs may renew
        # late, and a run that changes hands mid-bench measures takeovers, not throughput.
        cmd += ["--concurrency", str(max(1, runs // processes)), "--poll", "0.2"]
        cmd += ["--lease-ttl", "60"]
        errors = (settings.workdir / f"workers-{processes}.log").open("wb")
        procs = [
            await asyncio.create_subprocess_exec(
                *cmd, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=errors
            )
            for _ in range(processes)
        ]
        try:
            for p in procs:  # the CLI prints one line once the worker listens for work
                assert p.stdout is not None
                line = await asyncio.wait_for(p.stdout.readline(), timeout=120)
                if b"ready" not in line:
                    raise RuntimeError(f"workers bench: a worker did not start; see {errors.name}")
            pool = pg_pool(store)
            pids = {p.pid for p in procs}
            cpu0, pg0, t0 = _cpu_s(pids), _cpu_s(), time.perf_counter()
            await pool.execute("UPDATE runs SET status = 'queued' WHERE status = 'paused'")
            await pool.execute("SELECT pg_notify('tether_work', '')")
            while True:
                done = await pool.fetchval("SELECT count(*) FROM runs WHERE status = 'succeeded'")
                if done >= runs:
                    break
                failed = await pool.fetchval("SELECT count(*) FROM runs WHERE status = 'failed'")
                if failed or any(p.returncode is not None for p in procs):
                    raise RuntimeError(
                        f"workers bench: {failed} runs failed or a worker exited; see {errors.name}"
                    )
                await asyncio.sleep(0.02)
            wall = time.perf_counter() - t0
            cpu, pg_cpu = _cpu_s(pids) - cpu0, _cpu_s() - pg0
            records = await pool.fetchval("SELECT count(*) FROM run_log WHERE seq > 0")
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                await asyncio.wait_for(p.wait(), timeout=60)
            errors.close()
        return wall, cpu, pg_cpu, records
    finally:
        await store.close()


async def _floor(settings: Settings, records: int) -> float:
    """Rows/s of back-to-back 64-row bare INSERTs of ~300-byte rows from this process."""
    store = await open_pg(settings)
    try:
        pool = pg_pool(store)
        row = b"x" * 300
        batches = max(1, -(-records // 64))
        t0 = time.perf_counter()
        for i in range(batches):
            await bare_insert_many(pool, f"floor-{i}", 0, [row] * 64)
        return batches * 64 / (time.perf_counter() - t0)
    finally:
        await store.close()


def run(settings: Settings) -> list[Line]:
    runs = settings.size(200, 1000)
    lines: list[Line] = []
    for processes in PROCESSES:
        wall, cpu, pg_cpu, records = asyncio.run(_one(settings, processes, runs))
        floor = asyncio.run(_floor(settings, records))
        lines.append(
            Line(
                "workers",
                f"{processes} worker process(es), {runs:,} runs x {NODES} nodes, records/s",
                records / wall,
                "rec/s",
                "bare 64-row INSERTs from one process, rows/s",
                floor,
                note=f"CPU in the window: workers {cpu:.1f} s, PostgreSQL {pg_cpu:.1f} s "
                f"(all its processes) of {wall:.1f} s wall",
                extra={"worker_cpu_s": cpu, "pg_cpu_s": pg_cpu, "wall_s": wall},
            )
        )
    return lines
