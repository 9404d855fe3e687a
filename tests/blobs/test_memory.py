"""A 100 MB blob streams in and out without being held in memory (peak RSS, subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")
BLOB_MB = 100
# Well under the blob's size: chunks, one or two S3 parts, and allocator slack.
MAX_GROWTH_MB = 40

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
            # Warm up threads, connection pools and allocator arenas before the baseline.
            await round_trip(store, 17)
            baseline = peak_mb()
            await round_trip(store, int(sys.argv[2]))
            print(json.dumps({"baseline_mb": baseline, "peak_mb": peak_mb()}), flush=True)

    asyncio.run(main())
    # obstore's Rust runtime can abort (SIGABRT) while the interpreter finalizes after
    # heavy use; the measurement is done, so leave without finalizing (as the CLI does).
    os._exit(0)
    """
)


def run_child(url: str, env: dict[str, str]) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, url, str(BLOB_MB)],
        env={**os.environ, **env, "PYTHONPATH": SRC},
        capture_output=True,
        check=True,
        timeout=300,
    )
    result: dict[str, float] = json.loads(out.stdout.decode().strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("backend_name", ["local", "s3"])
def test_100mb_blob_streams_in_bounded_memory(
    backend_name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend_name == "local":
        url, env = (tmp_path / "blobs").as_uri(), {}
    else:
        endpoint = request.getfixturevalue("s3_endpoint")
        bucket = request.getfixturevalue("s3_bucket")
        url = f"s3://{bucket}/big?endpoint={endpoint}&region=us-east-1"
        env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    result = run_child(url, env)
    growth = result["peak_mb"] - result["baseline_mb"]
    assert growth < MAX_GROWTH_MB, (
        f"{backend_name}: peak RSS grew {growth:.1f} MB for a {BLOB_MB} MB blob "
        f"(baseline {result['baseline_mb']:.1f} MB)"
    )
