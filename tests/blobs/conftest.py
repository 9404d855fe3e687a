"""Fixtures: a real S3-speaking server (moto) on loopback, and both blob store backends."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from tether.blobs import BlobStore, LocalBlobStore
from tether.blobs.base import fanout

S3_KEY = "testing"
S3_REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """Endpoint url of a moto S3 server run as a subprocess on 127.0.0.1 (one per session)."""
    port = _free_port()
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


@dataclass
class Backend:
    """A store plus direct access to its raw storage, for tampering in tests."""

    name: str
    store: BlobStore
    raw: RawStorage


class RawStorage:
    """Reads and writes a backend's stored bytes without going through the store."""

    def write(self, sha256: str, data: bytes) -> None:
        raise NotImplementedError

    def remove(self, sha256: str) -> None:
        raise NotImplementedError

    def keys(self) -> list[str]:
        """Every stored file or object, relative to the store root, temps included."""
        raise NotImplementedError


class LocalRaw(RawStorage):
    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, sha256: str, data: bytes) -> None:
        (self.root / fanout(sha256)).write_bytes(data)

    def remove(self, sha256: str) -> None:
        (self.root / fanout(sha256)).unlink()

    def keys(self) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*") if p.is_file())


class S3Raw(RawStorage):
    def __init__(self, client: Any, bucket: str, prefix: str) -> None:
        self.client, self.bucket, self.prefix = client, bucket, prefix

    def write(self, sha256: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=f"{self.prefix}/{fanout(sha256)}", Body=data)

    def remove(self, sha256: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=f"{self.prefix}/{fanout(sha256)}")

    def keys(self) -> list[str]:
        resp = self.client.list_objects_v2(Bucket=self.bucket)
        keys = [o["Key"].removeprefix(f"{self.prefix}/") for o in resp.get("Contents", [])]
        # An unfinished multipart upload is hidden storage too.
        uploads = self.client.list_multipart_uploads(Bucket=self.bucket).get("Uploads", [])
        return sorted(keys + [f"upload:{u['Key']}" for u in uploads])


def make_s3_store(endpoint: str, bucket: str, prefix: str = "blobs") -> BlobStore:
    from tether.blobs.s3 import S3BlobStore

    return S3BlobStore(
        bucket,
        prefix,
        endpoint=endpoint,
        region=S3_REGION,
        access_key_id=S3_KEY,
        secret_access_key=S3_KEY,
    )


@pytest.fixture(params=["local", "s3"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    """Each backend in turn, so one test body covers both."""
    if request.param == "local":
        store: BlobStore = LocalBlobStore(tmp_path / "blobs")
        raw: RawStorage = LocalRaw(tmp_path / "blobs")
    else:
        endpoint = request.getfixturevalue("s3_endpoint")
        bucket = request.getfixturevalue("s3_bucket")
        store = make_s3_store(endpoint, bucket)
        raw = S3Raw(request.getfixturevalue("s3_client"), bucket, "blobs")
    async with store:
        yield Backend(request.param, store, raw)
