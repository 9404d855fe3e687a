"""Garbage collection: delete blobs no record points to, once they are old enough.

A blob is put before the record that points to it is appended (invariant 1), so an
unreferenced blob is either an orphan (its node crashed, failed or was retried) or
in flight (its record is about to be appended). Only blobs older than the grace
period, counted back from when the scan started, are deleted: the grace period must be
longer than the longest time between a put and its record, i.e. the longest node.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from tether.blobs.base import BlobStore
from tether.blobs.errors import BlobRefRefused
from tether.blobs.local import LocalBlobStore
from tether.blobs.sealed import SealedBlobStore
from tether.model.records import blob_refs, decode_log
from tether.store.base import Store

DEFAULT_GRACE_S = 3600.0
# Timestamps are coarse: S3's Last-Modified has whole seconds and a file's mtime comes
# from the kernel's coarse clock, so a blob put just after the scan started can look a
# little older than that. Never delete inside this margin, whatever the grace.
CLOCK_SLACK_S = 2.0
_RUNS_PAGE = 500


@dataclass(frozen=True, slots=True)
class GcReport:
    """What a collection found and freed (or, in a dry run, would free)."""

    runs: int
    referenced: int
    deleted: int
    freed_bytes: int
    kept: int
    kept_bytes: int
    dry_run: bool
    temps_removed: int = 0


async def run_ids(store: Store) -> AsyncIterator[str]:
    """Every run id in the runs table, each once (sub-agent runs included)."""
    seen: set[str] = set()
    offset = 0
    while True:
        page = await store.runs.list(limit=_RUNS_PAGE, offset=offset)
        # Newest first: a run created meanwhile shifts pages down, so rows repeat and none
        # is skipped. Its blobs are newer than the scan anyway.
        for info in page:
            if info.run_id not in seen:
                seen.add(info.run_id)
                yield info.run_id
        if len(page) < _RUNS_PAGE:
            return
        offset += len(page)


async def referenced_blobs(store: Store, blobs: BlobStore) -> tuple[int, set[str]]:
    """(number of runs scanned, sha256 of every blob of `blobs` that some record points to)."""
    shas: set[str] = set()
    runs = 0
    async for run_id in run_ids(store):
        runs += 1
        for record in decode_log(run_id, await store.log.read_all(run_id)):
            for _, ref in blob_refs(record):
                try:
                    shas.add(blobs.resolve(ref.url))
                except BlobRefRefused:
                    continue  # not a blob of this store: nothing here to keep
    return runs, shas


async def collect_garbage(
    store: Store,
    blobs: BlobStore,
    *,
    grace: float = DEFAULT_GRACE_S,
    dry_run: bool = False,
    now: float | None = None,
) -> GcReport:
    """Delete blobs that no record of any run points to and that are older than `grace`.

    `now` (default: the clock) is when the scan starts; tests pass a later one instead
    of waiting for blobs to age.
    """
    # Taken before reading any log: a blob put after this instant is never deleted.
    start = time.time() if now is None else now
    cutoff = start - max(grace, 0.0) - CLOCK_SLACK_S
    runs, referenced = await referenced_blobs(store, blobs)
    deleted = freed = kept = kept_bytes = 0
    async for info in blobs.list():
        if info.sha256 in referenced or info.mtime >= cutoff:
            kept += 1
            kept_bytes += info.size
            continue
        if not dry_run:
            await blobs.delete(info.sha256)
        deleted += 1
        freed += info.size
    temps = 0
    # An encrypting store keeps its blobs (and temp files) in the store it wraps.
    local = blobs.inner if isinstance(blobs, SealedBlobStore) else blobs
    if isinstance(local, LocalBlobStore) and not dry_run:
        temps = await local.remove_stale_temps(older_than=max(grace, CLOCK_SLACK_S))
    return GcReport(runs, len(referenced), deleted, freed, kept, kept_bytes, dry_run, temps)
