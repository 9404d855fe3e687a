"""`open_blob_store(url)`: pick a backend from a url."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from tether.blobs.base import BlobStore
from tether.blobs.errors import BlobError
from tether.blobs.local import LocalBlobStore


def default_blob_url(db_url: str, data_dir: Path) -> str:
    """A `blobs` directory beside the SQLite file, else in `data_dir`.

    With the default database that is `<data dir>/blobs`. A PostgreSQL database has no
    directory to sit beside, so its local default is the data dir too; production sets
    an `s3://` url instead (`--blobs`, `$TETHER_BLOB_URL`), shared by every replica.
    """
    if db_url.startswith("sqlite:///"):
        return str(Path(db_url.removeprefix("sqlite:///")).parent / "blobs")
    return str(data_dir / "blobs")


def open_blob_store(url: str, *, endpoint: str | None = None) -> BlobStore:
    """Open the blob store a url names.

    - `file:///abs/dir` or a plain path: a local directory (created if missing).
    - `s3://bucket/prefix`: S3-compatible storage. The endpoint comes from the `endpoint`
      query parameter, else the `endpoint` argument (the `tether` command passes
      `$TETHER_S3_ENDPOINT`), else obstore reads `AWS_ENDPOINT_URL`; the region from
      `region`, else `AWS_REGION` or `AWS_DEFAULT_REGION`; credentials from
      `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` (obstore reads the `AWS_*`
      variables itself). Example: `s3://runs/blobs?endpoint=http://127.0.0.1:9000`.
    """
    parts = urlsplit(url)
    if parts.scheme == "":
        return LocalBlobStore(url)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or parts.query:
            raise BlobError(f"blob store url {url!r}: expected file:///absolute/dir")
        return LocalBlobStore(unquote(parts.path))
    if parts.scheme == "s3":
        # Imported here so the local default works without the `s3` extra installed.
        from tether.blobs.s3 import S3BlobStore

        if not parts.netloc:
            raise BlobError(f"blob store url {url!r}: expected s3://bucket/prefix")
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        unknown = set(query) - {"endpoint", "region"}
        if unknown:
            raise BlobError(
                f"blob store url {url!r}: unknown parameters {sorted(unknown)}; "
                "expected endpoint and region"
            )
        return S3BlobStore(
            bucket=parts.netloc,
            prefix=parts.path.strip("/"),
            endpoint=query.get("endpoint") or endpoint,
            region=query.get("region"),
        )
    raise BlobError(
        f"blob store url {url!r}: unsupported scheme {parts.scheme!r}; use file:// or s3://"
    )
