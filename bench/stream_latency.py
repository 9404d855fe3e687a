"""Event streams across replicas: what NOTIFY costs an append, and append-to-client latency.

    PYTHONPATH=src python -m bench.stream_latency [--quick]

1. The append path: the store's append (one INSERT that also sends one pg_notify per
   batch) against the same INSERT without the NOTIFY, interleaved on the same pool.
2. A client streams a run from a `tether serve` replica that does not execute it (its
   fallback poll set to 30 s, so only LISTEN/NOTIFY can wake it) while this process
   appends records one by one: the time from an append returning (durable) to the
   client receiving that record's event.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from bench.common import pct, pg_pool
from bench.streams_common import TOKEN, fresh_db, node_record, serve, settings
from tether.client import TetherClient
from tether.engine.runtime import Runtime
from tether.model.records import Record, RunFinished, RunStatus, encode, now_us
from tether.store import RunInfo, Status, store_from_url

QUIET_APPEND = (
    "INSERT INTO run_log (run_id, seq, record) "
    "SELECT $1, e.seq, e.record FROM unnest($2::bigint[], $3::bytea[]) AS e(seq, record) "
    "ON CONFLICT (run_id, seq) DO UPDATE SET seq = NULL "
    "WHERE run_log.record IS DISTINCT FROM EXCLUDED.record"
)


def ms(samples: list[float]) -> str:
    return f"p50 {pct(samples, 0.5) * 1000:.3f} ms, p99 {pct(samples, 0.99) * 1000:.3f} ms"


async def notify_cost(url: str, n: int) -> None:
    store = store_from_url(url)
    await store.open()
    try:
        pool = pg_pool(store)
        for rid in ("with", "without"):
            await store.runs.create(RunInfo(run_id=rid, agent="x", status=Status.RUNNING), b"0")
        record = node_record(1)
        with_notify: list[float] = []
        without: list[float] = []
        for seq in range(1, n + 1):  # interleaved, so drift hits both alike
            t0 = time.perf_counter()
            await store.log.append("with", [(seq, record)])
            await asyncio.sleep(0)  # let the notifier send, as an executor between nodes would
            with_notify.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            async with pool.acquire() as conn:
                await conn.execute(QUIET_APPEND, "without", [seq], [record])
            without.append(time.perf_counter() - t0)
        ratio = pct(with_notify, 0.5) / pct(without, 0.5)
        print(f"append + NOTIFY    ({n}): {ms(with_notify)}")
        print(f"append, no NOTIFY  ({n}): {ms(without)}")
        print(f"NOTIFY cost on the append path: {ratio:.2f}x at p50")
        # Group commit: 16 writers at once, each its own run.
        for label, quiet in (("with NOTIFY", False), ("without NOTIFY", True)):
            rids = [f"{label}-{i}" for i in range(16)]
            for rid in rids:
                await store.runs.create(RunInfo(run_id=rid, agent="x", status=Status.RUNNING), b"0")

            async def writer(rid: str, quiet: bool = quiet) -> None:
                for seq in range(1, n // 4 + 1):
                    if quiet:
                        async with pool.acquire() as conn:
                            await conn.execute(QUIET_APPEND, rid, [seq], [record])
                    else:
                        await store.log.append(rid, [(seq, record)])

            t0 = time.perf_counter()
            await asyncio.gather(*(writer(r) for r in rids))
            rate = 16 * (n // 4) / (time.perf_counter() - t0)
            print(f"16 concurrent writers, {label}: {rate:,.0f} appends/s")
    finally:
        await store.close()


async def cross_replica(url: str, n: int) -> None:
    replica = serve(url, "--poll", "30", "--max-stream", "600")
    store = store_from_url(url)
    await store.open()
    try:
        graph = await Runtime(store).create("demo", {"question": "bench"}, status=Status.RUNNING)
        run_id = graph.run_id
        appended: dict[int, float] = {}
        received: dict[int, float] = {}
        connected = asyncio.Event()

        async def follow() -> None:
            async with TetherClient(replica.url, TOKEN) as client:
                async for event in client.events(run_id):
                    received[event.seq or 0] = time.perf_counter()
                    connected.set()

        follower = asyncio.create_task(follow())
        await connected.wait()  # seq 0 arrived: the stream is live
        for seq in range(1, n + 1):
            await store.log.append(run_id, [(seq, node_record(seq))])
            appended[seq] = time.perf_counter()
            await asyncio.sleep(0.005)
        finish = Record(
            at_us=now_us(), run_finished=RunFinished(status=RunStatus.RUN_STATUS_SUCCEEDED)
        )
        await store.log.append(run_id, [(n + 1, encode(finish))])
        await asyncio.wait_for(follower, 60)
        lags = [received[s] - appended[s] for s in range(1, n + 1)]
        print(f"append -> event on another replica ({n} records): {ms(lags)}")
    finally:
        await store.close()
        replica.stop()


async def main(quick: bool) -> None:
    s = settings(quick)
    url = await fresh_db(s)
    n = s.size(200, 2000)
    await notify_cost(url, n)
    await cross_replica(url, s.size(100, 1000))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    asyncio.run(main(parser.parse_args().quick))
