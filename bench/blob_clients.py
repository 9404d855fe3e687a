"""Compare S3 clients (obstore, aioboto3) for the blob store: put/get of 4 KiB and 8 MiB.

Runs against a moto S3 server started as a subprocess on 127.0.0.1 (a separate process,
so the server does not share the client's GIL). Prints median latency per operation.

    pip install aioboto3   # the comparison client; not a tether dependency
    python bench/blob_clients.py [--small-n 200] [--large-n 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable

BUCKET = "bench"
SMALL = 4 * 1024
LARGE = 8 * 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(endpoint + "/moto-api/", timeout=1).close()
            return proc, endpoint
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("moto server did not start") from None
            time.sleep(0.05)


async def timed(n: int, op: Callable[[int], Awaitable[object]]) -> float:
    """Median milliseconds of `n` sequential calls (one warm-up call first)."""
    await op(-1)
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        await op(i)
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


async def bench_obstore(endpoint: str, small_n: int, large_n: int) -> dict[str, float]:
    import obstore
    from obstore.store import S3Store

    store = S3Store(
        BUCKET,
        endpoint=endpoint,
        region="us-east-1",
        access_key_id="testing",
        secret_access_key="testing",
        client_options={"allow_http": True},
    )
    out = {}
    for label, size, n in (("4KiB", SMALL, small_n), ("8MiB", LARGE, large_n)):
        data = os.urandom(size)

        async def put(i: int, data: bytes = data, label: str = label) -> object:
            # One PUT request, as put_object does; multipart is measured by the store tests.
            return await obstore.put_async(store, f"o/{label}/{i}", data, use_multipart=False)

        async def get(i: int, label: str = label) -> object:
            result = await obstore.get_async(store, f"o/{label}/{i}")
            return await result.bytes_async()

        out[f"put {label}"] = await timed(n, put)
        out[f"get {label}"] = await timed(n, get)
    return out


async def bench_aioboto3(endpoint: str, small_n: int, large_n: int) -> dict[str, float]:
    import aioboto3

    session = aioboto3.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1"
    )
    out = {}
    async with session.client("s3", endpoint_url=endpoint) as s3:
        for label, size, n in (("4KiB", SMALL, small_n), ("8MiB", LARGE, large_n)):
            data = os.urandom(size)

            async def put(i: int, data: bytes = data, label: str = label) -> object:
                return await s3.put_object(Bucket=BUCKET, Key=f"a/{label}/{i}", Body=data)

            async def get(i: int, label: str = label) -> object:
                resp = await s3.get_object(Bucket=BUCKET, Key=f"a/{label}/{i}")
                async with resp["Body"] as body:
                    return await body.read()

            out[f"put {label}"] = await timed(n, put)
            out[f"get {label}"] = await timed(n, get)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small-n", type=int, default=200)
    parser.add_argument("--large-n", type=int, default=8)
    args = parser.parse_args()
    proc, endpoint = start_moto()
    try:
        urllib.request.urlopen(
            urllib.request.Request(f"{endpoint}/{BUCKET}", method="PUT"), timeout=5
        ).close()
        results = {
            "obstore": asyncio.run(bench_obstore(endpoint, args.small_n, args.large_n)),
            "aioboto3": asyncio.run(bench_aioboto3(endpoint, args.small_n, args.large_n)),
        }
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    ops = list(results["obstore"])
    print(f"{'median ms':<12}" + "".join(f"{name:>12}" for name in results) + f"{'ratio':>10}")
    for op in ops:
        a, b = results["obstore"][op], results["aioboto3"][op]
        print(f"{op:<12}{a:>12.2f}{b:>12.2f}{b / a:>9.2f}x")
    print("ratio = aioboto3 / obstore (above 1: obstore is faster)")


if __name__ == "__main__":
    main()
