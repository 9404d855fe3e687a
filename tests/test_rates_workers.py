"""A model rate limit shared by three real worker processes on PostgreSQL, as the model
server's own request log sees it."""

from __future__ import annotations

import asyncio
import signal

import httpx2

from tests.flow_processes import start_workers, tether
from tests.rate_agents import MODEL, answer
from tether import Runtime, Status
from tether.model.run_view import rate_wait_ms
from tether.store import store_from_url
from tether.testing import serve_local_models

RUNS = 12
LIMIT, PER = 4, 6.0  # 40 requests a minute, counted in windows of 6 s: one every 1.5 s
# How much the time from the limit's grant to the server's log may differ between two
# requests: three workers, the server and the database share a loaded 2-core machine, where
# a process can wait its turn for 0.4 s (0.93 s seen once). Less than the spacing, so a
# limit granting twice its rate still shows 7 requests where 4 are allowed.
JITTER = 1.2


def most_in_a_window(times: list[float], window: float) -> int:
    """The most requests the log shows in any window of `window` seconds."""
    times = sorted(times)
    return max(sum(1 for t in times[i:] if t < start + window) for i, start in enumerate(times))


async def test_three_workers_share_one_model_limit(fresh_pg_database: str) -> None:
    url = fresh_pg_database
    out = await tether(
        url, "limits", "set", "--model", MODEL, "--rpm", str(LIMIT), "--per", str(PER)
    )
    assert "rate limit set" in out
    store = store_from_url(url)
    await store.open()
    try:
        rt = Runtime(store)
        async with serve_local_models({"rated": answer}) as models:
            # The server's first request takes it a while to set up; not what is measured.
            async with httpx2.AsyncClient() as client:
                warm = {"model": "script:rated", "messages": [{"role": "user", "content": "w"}]}
                await client.post(models.openai_base_url + "/chat/completions", json=warm)
            models.reset()
            workers = await start_workers(
                url, 3, "--concurrency", "8", model_url=models.base_url,
                stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            # Queued once all three are up: a worker still importing its modules would hold a
            # core while another sends a granted request (seen: a request reached the server
            # 0.93 s after its grant, and a 3.5 s window showed 5).
            run_ids = [
                await rt.submit("tests.rate_agents:rated", f"question {i}") for i in range(RUNS)
            ]
            async with asyncio.timeout(120):
                # Another process finishes the runs: polled, as nothing here is told.
                while (await store.runs.count_by_status()).get(Status.SUCCEEDED, 0) < RUNS:  # noqa: ASYNC110
                    await asyncio.sleep(0.2)
            for w in workers:
                w.send_signal(signal.SIGTERM)
            for w in workers:
                assert await asyncio.wait_for(w.wait(), 60) == 0
        times = [r.at for r in models.requests if r.status == 200]
        assert len(times) == RUNS  # one model call a run, none refused
        # Without the limit the three workers send all 12 at once; with it, no window of
        # PER seconds (less the jitter of the path to the log) shows more than LIMIT.
        assert most_in_a_window(times, PER - JITTER) <= LIMIT
        assert max(times) - min(times) >= (RUNS - 1) * PER / LIMIT - JITTER
        graphs = [await rt.load(run_id) for run_id in run_ids]
        # A worker claims up to 8 queued runs at once: most of its calls waited, and say so.
        assert sum(1 for g in graphs if rate_wait_ms(g) > 0) >= RUNS // 3
    finally:
        await store.close()
