"""Blob memory: a big blob streams into and out of the local blob store in bounded memory.

A subprocess (a clean heap) warms up with a 17 MiB round trip, takes its peak RSS as the
baseline, then puts and reads back a blob of N MiB, checking size and sha256, and reports
its peak RSS again. The floor is the blob's own size: the ratio is the fraction of the
blob the process ever held at once (chunks, buffers, allocator slack). Target: under 0.4.
This was a unit test with an RSS threshold; a threshold belongs here, measured per run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from bench.common import Line, Settings

ROOT = Path(__file__).resolve().parent.parent
TARGET = 0.4

CHILD = textwrap.dedent(
    """
    import asyncio, hashlib, json, os, resource, sys
    from tether.blobs import open_blob_store

    MIB = 1 << 20

    def peak_mb():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    async def source(n_mib, digest):
        for _ in range(n_mib):
            chunk = os.urandom(MIB)
            digest.update(chunk)
            yield chunk

    async def round_trip(store, n_mib):
        expected = hashlib.sha256()
        ref = await store.put(source(n_mib, expected))
        read, got = 0, hashlib.sha256()
        async with store.open(ref) as chunks:
            async for chunk in chunks:
                read += len(chunk)
                got.update(chunk)
        assert ref.sha256 == expected.hexdigest() == got.hexdigest(), "hash differs"
        assert read == ref.size == n_mib * MIB, "size differs"

    async def main():
        async with open_blob_store(sys.argv[1]) as store:
            # Warm up threads and allocator arenas before the baseline.
            await round_trip(store, 17)
            baseline = peak_mb()
            await round_trip(store, int(sys.argv[2]))
            print(json.dumps({"baseline_mb": baseline, "peak_mb": peak_mb()}), flush=True)

    asyncio.run(main())
    """
)


def probe(url: str, blob_mb: int) -> dict[str, float]:
    """Round-trip one blob of `blob_mb` MiB through the store at `url` in a subprocess."""
    src = str(ROOT / "src")
    out = subprocess.run(
        [sys.executable, "-c", CHILD, url, str(blob_mb)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([src, str(ROOT)])},
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    report: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return report


def run(settings: Settings) -> list[Line]:
    blob_mb = settings.size(32, 100)
    report = probe((settings.workdir / "blobs").as_uri(), blob_mb)
    growth = max(0.0, report["peak_mb"] - report["baseline_mb"])
    return [
        Line(
            "blob_memory",
            f"peak RSS growth streaming a {blob_mb} MiB blob in and out (local store)",
            # A growth below 1 MiB shows as 1 MiB: the ratio stays finite and positive.
            max(growth, 1.0),
            "MiB",
            "the blob's size",
            float(blob_mb),
            target=f"< {TARGET}",
            ok=growth / blob_mb < TARGET,
            note=f"baseline {report['baseline_mb']:.0f} MiB",
        )
    ]
