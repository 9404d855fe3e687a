"""`open_blob_store` picks the backend and its settings from a url and the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.blobs import BlobError, LocalBlobStore, open_blob_store
from tether.blobs.s3 import S3BlobStore


@pytest.mark.parametrize("form", ["path", "file url", "file url localhost"])
async def test_local_from_path_or_file_url(tmp_path: Path, form: str) -> None:
    root = tmp_path / "with space" / "blobs"
    url = {
        "path": str(root),
        "file url": root.as_uri(),
        "file url localhost": "file://localhost" + root.as_uri().removeprefix("file://"),
    }[form]
    async with open_blob_store(url) as store:
        assert isinstance(store, LocalBlobStore)
        assert store.root == root
        assert store.root_url == root.as_uri()
        ref = await store.put(b"x")
        assert await store.get(ref) == b"x"
        assert store.resolve(ref.url) == ref.sha256


async def test_s3_from_query_parameters(
    s3_endpoint: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("TETHER_S3_ENDPOINT", raising=False)
    url = f"s3://{s3_bucket}/runs/blobs/?endpoint={s3_endpoint}&region=us-east-1"
    async with open_blob_store(url) as store:
        assert isinstance(store, S3BlobStore)
        assert store.root_url == f"s3://{s3_bucket}/runs/blobs"
        ref = await store.put(b"hello")
        assert (
            ref.url
            == f"s3://{s3_bucket}/runs/blobs/{ref.sha256[:2]}/{ref.sha256[2:4]}/{ref.sha256}"
        )
        assert await store.get(ref) == b"hello"


@pytest.mark.parametrize("variable", ["TETHER_S3_ENDPOINT", "AWS_ENDPOINT_URL"])
async def test_s3_from_environment(
    s3_endpoint: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    for name in ("TETHER_S3_ENDPOINT", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, s3_endpoint)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    async with open_blob_store(f"s3://{s3_bucket}") as store:
        assert store.root_url == f"s3://{s3_bucket}"
        ref = await store.put(b"from env")
        assert await store.exists(ref)
        assert [info.sha256 async for info in store.list()] == [ref.sha256]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1/blobs", "unsupported scheme 'http'"),
        ("file://otherhost/blobs", "expected file:///absolute/dir"),
        ("s3:///prefix", "expected s3://bucket/prefix"),
        ("s3://bucket/p?endpont=http://127.0.0.1:1", "unknown parameters"),
    ],
)
def test_bad_store_urls(url: str, message: str) -> None:
    with pytest.raises(BlobError, match=message):
        open_blob_store(url)
