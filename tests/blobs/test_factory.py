"""`open_blob_store` picks the backend and its settings from a url, the `tether` command's
settings (`$TETHER_S3_ENDPOINT`) and obstore's `AWS_*` variables."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.blobs import BlobError, LocalBlobStore, open_blob_store
from tether.blobs.s3 import S3BlobStore
from tether.control.settings import Settings
from tether.control.wiring import open_blobs


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
    # TETHER_S3_ENDPOINT is the command's setting, handed down; obstore reads AWS_*.
    settings = Settings.from_env({**os.environ, "TETHER_BLOB_URL": f"s3://{s3_bucket}"})
    async with open_blobs(settings) as store:
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


def test_default_blob_url_is_the_env_else_beside_the_sqlite_file(tmp_path: Path) -> None:
    data = {"TETHER_DATA_DIR": str(tmp_path / "data")}
    sqlite = {**data, "TETHER_DATABASE_URL": f"sqlite:///{tmp_path}/x/run.db"}
    assert Settings.from_env(sqlite).blob_url() == str(tmp_path / "x" / "blobs")
    postgres = {**data, "TETHER_DATABASE_URL": "postgresql://db/tether"}
    assert Settings.from_env(postgres).blob_url() == str(tmp_path / "data" / "blobs")
    given = {**sqlite, "TETHER_BLOB_URL": "s3://bucket/prefix"}
    assert Settings.from_env(given).blob_url() == "s3://bucket/prefix"
