"""A real S3-speaking server (moto) on loopback for tests, and stores that use it."""

from __future__ import annotations

import socket

from tether.blobs import BlobStore

S3_KEY = "testing"
S3_REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
