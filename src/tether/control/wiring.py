"""One wiring for every command and the server: settings read once, pieces opened alike.

Settings come from flags, then the environment, then defaults, in `Settings.from_args`
only. `open_store` opens the store (read-only commands with `Store.open_existing`, which
creates nothing), `open_blobs` the blob store (sealed when a key ring is configured), and
`new_runtime` builds a runtime from both: the CLI's commands, `tether worker`, `tether
submit` and `tether serve` all get their store, blobs and runtime from here, so a run
queued by one of them can be executed by any other.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tether.blobs import BlobStore
from tether.blobs.errors import BlobError
from tether.blobs.factory import default_blob_url, open_blob_store
from tether.engine.ownership import DEFAULT_LEASE_TTL
from tether.engine.runtime import Runtime
from tether.store import Store, default_url, store_from_url

if TYPE_CHECKING:
    from tether.foundation.crypto.keyring import KeyRing

DEFAULT_GRACE = 25.0
# Runs a worker (or the server's embedded one) executes at once.
DEFAULT_CONCURRENCY = 16
# Seconds between looks at the store: a worker's for expired leases, a stream's slow poll.
DEFAULT_POLL = 1.0


@dataclass(frozen=True, slots=True)
class Settings:
    """Where the store and blobs are, and how runs are owned and drained."""

    db: str
    # None: `TETHER_BLOB_URL`, else a directory beside the SQLite file (`default_blob_url`).
    blobs: str | None = None
    lease_ttl: float = DEFAULT_LEASE_TTL
    grace: float = DEFAULT_GRACE
    keys: KeyRing | None = None
    concurrency: int = DEFAULT_CONCURRENCY
    poll: float = DEFAULT_POLL

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Settings:
        """Flags first, then `TETHER_DATABASE_URL` / `TETHER_DATA_DIR` / `TETHER_BLOB_URL` /
        `TETHER_KEYS` / `TETHER_CONCURRENCY` / `TETHER_POLL`, then defaults. A malformed key
        ring, concurrency or poll interval stops every command here."""
        from tether.foundation.crypto.keyring import load_ring

        lease_ttl = getattr(args, "lease_ttl", None)
        grace = getattr(args, "grace", None)
        return cls(
            db=getattr(args, "db", None) or default_url(),
            blobs=getattr(args, "blobs", None),
            lease_ttl=DEFAULT_LEASE_TTL if lease_ttl is None else lease_ttl,
            grace=DEFAULT_GRACE if grace is None else grace,
            keys=load_ring(),
            concurrency=int(_setting(args, "concurrency", DEFAULT_CONCURRENCY, int, 1)),
            poll=_setting(args, "poll", DEFAULT_POLL, float, 0.001),
        )

    def blob_url(self) -> str:
        return self.blobs or default_blob_url(self.db)


def _setting(
    args: argparse.Namespace, name: str, default: float, kind: type[int] | type[float], least: float
) -> float:
    """`--NAME` if given, else `$TETHER_NAME`, else `default`; ValueError naming where a
    value that is not a number of at least `least` came from."""
    value = getattr(args, name, None)
    where = f"--{name}"
    if value is None:
        env = f"TETHER_{name.upper()}"
        raw = os.environ.get(env)
        if raw is None:
            return default
        where = f"${env}"
        try:
            value = kind(raw)
        except ValueError:
            raise ValueError(
                f"{where}={raw!r} is not {'an integer' if kind is int else 'a number'}"
            ) from None
    if not math.isfinite(value) or value < least:
        raise ValueError(f"{where} must be at least {least:g}, not {value:g}")
    return float(value) if kind is float else value


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
    blobs = open_blob_store(settings.blob_url())
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
        store, grace=settings.grace, lease_ttl=settings.lease_ttl, keys=settings.keys, blobs=blobs
    )
