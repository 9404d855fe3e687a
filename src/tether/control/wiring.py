"""One wiring for every command and the server: settings read once, pieces opened alike.

Settings come from flags, then the environment, then defaults, in
`tether.control.settings` only (`Settings.from_args`, `Settings.from_env`). `open_store`
opens the store (read-only commands with `Store.open_existing`, which creates nothing),
`open_blobs` the blob store (sealed when a key ring is configured), and `new_runtime`
builds a runtime from both: the CLI's commands, `tether worker`, `tether submit` and
`tether serve` all get their store, blobs and runtime from here, so a run queued by one of
them can be executed by any other.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from tether.blobs import BlobStore
from tether.blobs.errors import BlobError
from tether.blobs.factory import open_blob_store
from tether.control.settings import (
    DEFAULT_CONCURRENCY,
    DEFAULT_GRACE,
    DEFAULT_POLL,
    Settings,
)
from tether.engine.runtime import Runtime
from tether.store import Store, store_from_url

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_GRACE",
    "DEFAULT_POLL",
    "PROBE",
    "Settings",
    "check_blobs",
    "new_runtime",
    "open_blobs",
    "open_store",
]


@asynccontextmanager
async def open_store(settings: Settings, *, read_only: bool = False) -> AsyncIterator[Store]:
    """The store, opened; read-only, it must exist with its schema (nothing is created)."""
    store = store_from_url(settings.db)
    if read_only:
        await store.open_existing()
    else:
        await store.open()
    try:
        yield store
    finally:
        await store.close()


def open_blobs(settings: Settings) -> BlobStore:
    """The blob store (an async context manager), sealed when a key ring is configured."""
    blobs = open_blob_store(settings.blob_url(), endpoint=settings.s3_endpoint)
    if settings.keys is None:
        return blobs
    from tether.blobs.sealed import SealedBlobStore

    return SealedBlobStore(blobs, settings.keys)


# What `check_blobs` writes: one small blob, the same every time (content-addressed, so
# each check rewrites or touches it; `tether blobs gc` removes it like any unreferenced blob).
PROBE = b"tether: blob store write check\n"


async def check_blobs(blobs: BlobStore, settings: Settings) -> None:
    """Write a probe blob and read it back, so a misconfigured blob store (an unwritable
    directory, an unreachable or refusing S3 endpoint) is reported at start-up, naming its
    url, not at the first run that offloads a value."""
    try:
        ref = await blobs.put(PROBE, "text/plain")
        if await blobs.get(ref) != PROBE:
            raise BlobError("the blob read back differs from the one written")
    except Exception as exc:
        raise BlobError(
            f"blob store {settings.blob_url()!r} is not usable: {exc}; "
            "fix --blobs / $TETHER_BLOB_URL"
        ) from exc


def new_runtime(store: Store, settings: Settings, *, blobs: BlobStore | None = None) -> Runtime:
    """A runtime on `store` (and `blobs`) with the settings' grace, lease TTL and keys."""
    return Runtime(
        store,
        grace=settings.grace,
        lease_ttl=settings.lease_ttl,
        keys=settings.keys,
        blobs=blobs,
        per_run_keys=settings.per_run_keys,
    )
