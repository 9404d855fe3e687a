"""Shared fixtures: real stores (SQLite file; PostgreSQL joins in tests/store), a moto S3."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.s3server import S3_KEY, S3_REGION, free_port
from tether.store import Store, store_from_url


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[Store]:
    store = store_from_url(f"sqlite:///{tmp_path / 'tether.db'}")
    async with store:
        yield store


@pytest.fixture(params=["sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    store = store_from_url(f"sqlite:///{tmp_path / 'tether.db'}")
    async with store:
        yield store


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """Endpoint url of a moto S3 server run as a subprocess on 127.0.0.1 (one per session)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    # Ready when it answers a request, not after a fixed sleep.
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto server on {endpoint} did not start") from None
            time.sleep(0.05)
    try:
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def s3_client(s3_endpoint: str) -> Any:
    """A plain boto3 client on the moto server, to inspect and tamper with objects."""
    return boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        aws_access_key_id=S3_KEY,
        aws_secret_access_key=S3_KEY,
        region_name=S3_REGION,
    )


@pytest.fixture
def s3_bucket(s3_client: Any) -> str:
    """A fresh, empty bucket."""
    name = f"b-{uuid.uuid4().hex[:16]}"
    s3_client.create_bucket(Bucket=name)
    return name
