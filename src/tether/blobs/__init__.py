"""Content-addressed blob stores: a local directory by default, S3-compatible in production."""

from tether.blobs.base import BlobInfo, BlobReader, BlobRef, BlobStore
from tether.blobs.errors import (
    BlobCorrupt,
    BlobError,
    BlobNotFound,
    BlobRefRefused,
    BlobStoreUnavailable,
)
from tether.blobs.factory import open_blob_store
from tether.blobs.local import LocalBlobStore

__all__ = [
    "BlobCorrupt",
    "BlobError",
    "BlobInfo",
    "BlobNotFound",
    "BlobReader",
    "BlobRef",
    "BlobRefRefused",
    "BlobStore",
    "BlobStoreUnavailable",
    "LocalBlobStore",
    "open_blob_store",
]
