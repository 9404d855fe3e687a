"""A schedule firing every second, three real worker processes on PostgreSQL, one of them
SIGKILLed midway: exactly one run per fire time, none missing."""

from __future__ import annotations

import asyncio
import re
import signal
from datetime import UTC, datetime

from tests.flow_processes import start_workers, tether
from tether import Status
from tether.store import RunFilter, store_from_url

QUEUED = re.compile(r"schedule every-second: queued run (sched-every-second-\d{8}T\d{6}Z)")


def fire_time(run_id: str) -> int:
    stamp = run_id.rsplit("-", 1)[1]
    return int(datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp())


async def test_every_second_fires_once_per_time_across_workers_one_killed(
    fresh_pg_database: str,
) -> None:
    url = fresh_pg_database
    cron = "* * * * * *"
    out = await tether(url, "schedule", "add", "every-second", "--cron", cron,
                       "--agent", "tests.schedule_agents:tick", "--input", '"tick"')  # fmt: skip
    assert "schedule every-second added" in out
    workers = await start_workers(url, 3, "--lease-ttl", "2")
    logs: list[list[str]] = [[] for _ in workers]

    async def read(i: int) -> None:
        stream = workers[i].stderr
        assert stream is not None
        async for line in stream:
            logs[i].append(line.decode())

    readers = [asyncio.ensure_future(read(i)) for i in range(3)]
    await asyncio.sleep(5)
    workers[0].send_signal(signal.SIGKILL)  # midway, whatever it was doing
    await asyncio.sleep(5)
    await tether(url, "schedule", "remove", "every-second")
    store = store_from_url(url)
    await store.open()
    try:
        where = RunFilter(run_id_prefix="sched-every-second-")
        async with asyncio.timeout(60):  # the killed worker's runs wait out its lease
            while True:
                runs = await store.runs.list(where=where, limit=1000)
                if all(r.status is Status.SUCCEEDED for r in runs):
                    break
                await asyncio.sleep(0.2)  # other processes run them
    finally:
        await store.close()
    for w in workers[1:]:
        w.send_signal(signal.SIGTERM)
    for w in workers:
        await asyncio.wait_for(w.wait(), 60)
    await asyncio.gather(*readers)
    times = sorted(fire_time(r.run_id) for r in runs)
    # Every second from the first fire time to the last has its run, and only one.
    assert len(times) >= 8
    assert times == list(range(times[0], times[-1] + 1))
    # Each fire time was queued by exactly one worker (the others found it taken).
    queued = [m.group(1) for log in logs for line in log if (m := QUEUED.search(line))]
    assert sorted(queued) == sorted(r.run_id for r in runs)
    assert len({i for i, log in enumerate(logs) if any(QUEUED.search(x) for x in log)}) >= 2
