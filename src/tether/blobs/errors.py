"""Errors raised by blob stores."""

from tether.foundation.errors import TetherError


class BlobError(TetherError):
    """Base of every blob store error."""


class BlobNotFound(BlobError):
    """The store has no blob under the requested sha256."""


class BlobCorrupt(BlobError):
    """The stored bytes do not match the ref's size or sha256."""


class BlobRefRefused(BlobError):
    """A url or key does not belong to this store, so it is never fetched."""


class BlobStoreUnavailable(BlobError):
    """The backend failed (network, permissions, disk); the blob state is unknown."""
