"""Concurrency limits, priorities and fair turns across real worker processes on PostgreSQL,
as the runs table shows them."""

from __future__ import annotations

import asyncio
import signal

import asyncpg

from tests.flow_processes import start_workers, tether
from tether import Runtime, Status
from tether.store import store_from_url

AGENT = "tests.limit_agents:nap"
RUNS, NAP = 40, 0.3
LIMITS = {"A": 2, "B": 5}
EXECUTING = """
SELECT concurrency_key, count(*) FROM runs WHERE status = 'running' GROUP BY concurrency_key
"""


async def test_four_workers_never_run_more_of_a_key_than_its_limit(fresh_pg_database: str) -> None:
    url = fresh_pg_database
    for key, n in LIMITS.items():
        await tether(url, "limits", "set", "--agent", AGENT, "--key", key, "--max-running", str(n))
    store = store_from_url(url)
    await store.open()
    conn = await asyncpg.connect(url)
    try:
        rt = Runtime(store)
        # All of A first: with no turns over keys, B would wait behind A's 40.
        for key in LIMITS:
            for _ in range(RUNS):
                await rt.submit(AGENT, NAP, key=key)
        workers = await start_workers(url, 4, "--concurrency", "8")
        most = dict.fromkeys(LIMITS, 0)
        a_queued_when_b_done = None
        async with asyncio.timeout(60):
            while True:
                executing = dict(await conn.fetch(EXECUTING))
                for key in LIMITS:
                    most[key] = max(most[key], executing.get(key, 0))
                done = dict(await conn.fetch(
                    "SELECT concurrency_key, count(*) FROM runs WHERE status = 'succeeded'"
                    " GROUP BY concurrency_key"
                ))  # fmt: skip
                if a_queued_when_b_done is None and done.get("B", 0) == RUNS:
                    a_queued_when_b_done = RUNS - done.get("A", 0) - executing.get("A", 0)
                if done.get("A", 0) == RUNS and done.get("B", 0) == RUNS:
                    break
                await asyncio.sleep(0.05)
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            assert await asyncio.wait_for(w.wait(), 60) == 0
        assert most == LIMITS  # each key ran at its limit, never above it
        assert a_queued_when_b_done is not None and a_queued_when_b_done > 0
        counts = await store.runs.count_by_status()
        assert counts == {Status.SUCCEEDED: 2 * RUNS}
    finally:
        await conn.close()
        await store.close()


async def test_a_small_key_and_a_high_priority_are_not_starved_by_a_big_key(
    fresh_pg_database: str,
) -> None:
    url = fresh_pg_database
    store = store_from_url(url)
    await store.open()
    try:
        rt = Runtime(store)
        big = [await rt.submit(AGENT, 0.1, key="big") for _ in range(40)]
        small = [await rt.submit(AGENT, 0.1, key="small") for _ in range(4)]
        urgent = await rt.submit(AGENT, 0.1, priority=9)
        [worker] = await start_workers(url, 1, "--concurrency", "4")
        async with asyncio.timeout(60):
            while (await store.runs.count_by_status()).get(Status.SUCCEEDED, 0) < 45:  # noqa: ASYNC110
                await asyncio.sleep(0.1)
        worker.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(worker.wait(), 60) == 0
        finished = {}
        for run_id in [*big, *small, urgent]:
            info = await store.runs.get(run_id)
            assert info is not None
            finished[run_id] = info.updated_at
        # Oldest first, the small key's runs and the urgent one would finish after all 40 of
        # the big key's. The urgent run is claimed at the first free slot; each free slot
        # then goes to the small key while the big one holds the others (it had its turns).
        big_done = sorted(finished[r] for r in big)
        assert finished[urgent] < big_done[8]
        assert max(finished[r] for r in small) < big_done[15]
    finally:
        await store.close()


async def test_one_worker_one_slot_claims_by_priority_then_keys_in_turns(
    fresh_pg_database: str,
) -> None:
    url = fresh_pg_database
    store = store_from_url(url)
    await store.open()
    try:
        rt = Runtime(store)
        big = [await rt.submit(AGENT, 0.02, key="big") for _ in range(4)]
        small = [await rt.submit(AGENT, 0.02, key="small") for _ in range(2)]
        urgent = await rt.submit(AGENT, 0.02, key="big", priority=9)
        [worker] = await start_workers(url, 1, "--concurrency", "1")
        async with asyncio.timeout(60):
            while (await store.runs.count_by_status()).get(Status.SUCCEEDED, 0) < 7:  # noqa: ASYNC110
                await asyncio.sleep(0.1)
        worker.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(worker.wait(), 60) == 0
        # One slot: the order they finished in is the order they were claimed in. The urgent
        # run first; then the keys alternate, the one served longest ago first (small had
        # never been served when big's urgent run finished).
        finished = {}
        for run_id in [*big, *small, urgent]:
            info = await store.runs.get(run_id)
            assert info is not None
            finished[run_id] = info.updated_at
        order = sorted(finished, key=finished.__getitem__)
        assert order == [urgent, small[0], big[0], small[1], big[1], big[2], big[3]]
    finally:
        await store.close()
