"""Fixtures: both blob store backends, with raw access to their storage for tampering.

The moto S3 server fixtures (`s3_endpoint`, `s3_client`, `s3_bucket`) are in tests/conftest.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.s3server import make_s3_store
from tether.blobs import BlobStore, LocalBlobStore
from tether.blobs.base import fanout


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
