"""The local model server's simulated timing, through the real OpenAI SDK.

Three measurements that used to be timing assertions in unit tests (the unit tests now
check what was answered and in what order; the time it took is measured here):

- five requests for a turn with 300 ms latency, sent at once, against one 300 ms turn:
  the server answers concurrently, so the ratio stays near 1 (serial would be 5);
- a request rate-limited twice with `retry-after-ms: 50` then answered, against the
  100 ms the two waits add up to: the SDK honours the header (its own back-off is ~0.5 s
  a retry, a ratio near 10);
- a streamed turn of six chunks 40 ms apart, against the 200 ms of five gaps.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import openai

from bench.common import Line, Settings
from tether.testing import RateLimited, Turn, serve_local_models

USER: list[Any] = [{"role": "user", "content": "hello"}]


async def _measure() -> dict[str, float]:
    async with serve_local_models() as models:
        models.scripts.add("slow", [Turn(text="done", latency=0.3)])
        busy = [RateLimited(retry_after=0.05), RateLimited(retry_after=0.05)]
        models.scripts.add("busy", [Turn(text="finally", faults=busy)])
        models.scripts.add("drip", [Turn(text="w1 w2 w3 w4", chunk_delay=0.04)])
        async with openai.AsyncOpenAI(
            base_url=models.openai_base_url, api_key="any-key", max_retries=0
        ) as oai:
            t0 = time.perf_counter()
            await asyncio.gather(
                *(oai.chat.completions.create(model="script:slow", messages=USER) for _ in range(5))
            )
            concurrent = time.perf_counter() - t0
            t0 = time.perf_counter()
            await oai.with_options(max_retries=2).chat.completions.create(
                model="script:busy", messages=USER
            )
            retried = time.perf_counter() - t0
            t0 = time.perf_counter()
            stream = await oai.chat.completions.create(
                model="script:drip", messages=USER, stream=True
            )
            async for _ in stream:
                pass
            streamed = time.perf_counter() - t0
    return {"concurrent": concurrent, "retried": retried, "streamed": streamed}


def run(settings: Settings) -> list[Line]:
    m = asyncio.run(_measure())
    ms = 1000.0
    return [
        Line(
            "model_server",
            "5 concurrent requests for a 300 ms turn",
            m["concurrent"] * ms,
            "ms",
            "one 300 ms turn",
            300.0,
            target="< 3",
            ok=m["concurrent"] < 0.9,
        ),
        Line(
            "model_server",
            "two 429s with retry-after-ms 50, then the answer (SDK retries)",
            m["retried"] * ms,
            "ms",
            "the two 50 ms waits",
            100.0,
            target="1 to 9",
            ok=0.1 <= m["retried"] < 0.9,
        ),
        Line(
            "model_server",
            "a streamed turn of six chunks 40 ms apart",
            m["streamed"] * ms,
            "ms",
            "five 40 ms gaps",
            200.0,
            target=">= 1",
            ok=m["streamed"] >= 0.2,
        ),
    ]
