"""How many event streams one `tether serve` process holds, and how fast a record fans out.

    PYTHONPATH=src python -m bench.stream_capacity [--quick]

Opens N streams on one run against one server process (PostgreSQL, woken by NOTIFY),
waits until each has caught up (seq 0 received), then appends one record and times its
arrival on every stream. N grows in steps up to a bound; a step that cannot connect
every stream, or takes over 10 s to fan out, ends the run. Clients are raw sockets so the
client side stays light; the server's RSS is read from /proc.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
from collections.abc import Callable

from bench.common import pct
from bench.streams_common import TOKEN, fresh_db, node_record, serve, settings
from tether.engine.runtime import Runtime
from tether.store import Status, store_from_url


async def open_stream(host: str, port: int, run_id: str) -> tuple[asyncio.StreamReader, object]:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {TOKEN}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    await reader.readuntil(b"id: 0\n")
    return reader, writer


async def step(
    host: str, port: int, run_id: str, n: int, seq: int, store: object, rss: Callable[[], float]
) -> bool:
    conns: list[tuple[asyncio.StreamReader, object]] = []
    try:
        t0 = time.perf_counter()
        for i in range(0, n, 100):  # connect in waves, as a fleet of clients would
            conns += await asyncio.gather(
                *(open_stream(host, port, run_id) for _ in range(min(100, n - i)))
            )
        connect_s = time.perf_counter() - t0
        marker = f"id: {seq}\n".encode()

        async def arrival(reader: asyncio.StreamReader) -> float:
            await reader.readuntil(marker)
            return time.perf_counter()

        waits = [asyncio.ensure_future(arrival(r)) for r, _ in conns]
        await asyncio.sleep(0.2)  # every reader is parked on its socket
        t_append = time.perf_counter()
        await store.log.append(run_id, [(seq, node_record(seq))])  # type: ignore[attr-defined]
        arrivals = await asyncio.wait_for(asyncio.gather(*waits), 30)
        lags = [a - t_append for a in arrivals]
        print(
            f"{n:6d} streams: connected in {connect_s:5.2f} s; fan-out of one record "
            f"p50 {pct(lags, 0.5) * 1000:7.1f} ms, p99 {pct(lags, 0.99) * 1000:7.1f} ms, "
            f"max {max(lags) * 1000:7.1f} ms; server RSS {rss():.0f} MiB",
            flush=True,
        )
        return max(lags) < 10
    except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
        print(f"{n:6d} streams: failed ({type(exc).__name__}: {exc})", flush=True)
        return False
    finally:
        for _, writer in conns:
            writer.close()  # type: ignore[attr-defined]


async def main(quick: bool) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the server inherits it
    s = settings(quick)
    url = await fresh_db(s)
    server = serve(url, "--poll", "30", "--max-stream", "600")
    store = store_from_url(url)
    await store.open()
    try:
        run_id = (
            await Runtime(store).create("demo", {"question": "bench"}, status=Status.RUNNING)
        ).run_id
        host, port = server.url.removeprefix("http://").split(":")
        print(f"server RSS idle: {server.rss_mib():.0f} MiB")
        steps = [50, 100] if quick else [250, 500, 1000, 2000, 4000]
        for seq, n in enumerate(steps, start=1):
            ok = await step(host, int(port), run_id, n, seq, store, server.rss_mib)
            if not ok:
                break
            await asyncio.sleep(0.5)
    finally:
        await store.close()
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    asyncio.run(main(parser.parse_args().quick))
