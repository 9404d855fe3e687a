"""Exporting a run as a `.tlog` file: its records, its sub-agent runs' and (optionally) blobs.

Every record is written as plain bytes, whichever run holds it: a fork's referenced prefix
is read through its references (`LogStore.read`), so the file stands alone. Each run's log
is read once; a run that is still executing may gain records while its children are read,
so export a finished, paused or waiting run for a file that is one moment of the run.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from importlib import metadata
from typing import Any

from tether.blobs import BlobStore
from tether.foundation.errors import CannotExport, UnknownRun
from tether.model.records import blob_refs, decode_log
from tether.model.values import ref_of
from tether.ops.tlog.format import BLOB, FORMAT_VERSION, HEADER, RECORD, RUN, FrameWriter
from tether.store.base import RunFilter, RunInfo, Store

_PAGE = 500


async def export_run(
    store: Store, run_id: str, *, blobs: BlobStore | None = None
) -> AsyncIterator[bytes]:
    """The bytes of a `.tlog` file holding `run_id` and its sub-agent runs (recursively),
    chunk by chunk; with `blobs`, the blobs their records point to as well.

    UnknownRun, or CannotExport (a sub-agent run: export its parent), at the first chunk.
    """
    root = await store.runs.get(run_id)
    if root is None:
        raise UnknownRun(run_id)
    if root.parent_run_id:
        raise CannotExport(
            f"run {run_id} is a sub-agent run of {root.parent_run_id}; export its parent"
        )
    if blobs is not None and _sealed(blobs):
        raise CannotExport(
            "blobs sealed under a key ring cannot be exported yet: export without --blobs "
            "(the file then holds the records, whose blob refs point into this store)"
        )
    runs = await _with_children(store, root)
    origins = await store.forks.origins([r.run_id for r in runs])
    out = FrameWriter()
    yield out.start()
    yield out.json_frame(
        HEADER,
        {
            "format": FORMAT_VERSION,
            "tether": _version(),
            "run_id": run_id,
            "runs": [r.run_id for r in runs],
            "blobs": blobs is not None,
            "exported_at": time.time(),
        },
    )
    wanted: dict[str, Any] = {}  # sha256 -> the first ref that points to it
    records = 0
    for info in runs:
        rows = await store.log.read_all(info.run_id)
        origin = origins.get(info.run_id)
        yield out.json_frame(RUN, run_json(info, len(rows), origin.to_json() if origin else None))
        for row in rows:
            yield out.frame(RECORD, row)
        records += len(rows)
        if blobs is not None:
            for record in decode_log(info.run_id, rows):
                for _, ref in blob_refs(record):
                    wanted.setdefault(ref.sha256, ref)
    for sha256, ref in sorted(wanted.items()):
        assert blobs is not None
        data = await blobs.get(ref_of(ref))  # verified against its size and sha256
        yield out.frame(BLOB, bytes.fromhex(sha256) + data)
    yield out.end({"runs": len(runs), "records": records, "blobs": len(wanted)})


def run_json(info: RunInfo, records: int, origin: dict[str, Any] | None) -> dict[str, Any]:
    """A run's `R` frame: what recreates its row (`tether.ops.tlog.load.info_of` reads it)."""
    return {
        "run_id": info.run_id,
        "agent": info.agent,
        "agent_version": info.agent_version,
        "status": info.status.value,
        "reason": info.reason,
        "parent_run_id": info.parent_run_id,
        "created_at": info.created_at,
        "updated_at": info.updated_at,
        "origin": origin,
        "records": records,
    }


async def _with_children(store: Store, root: RunInfo) -> list[RunInfo]:
    """`root` and its sub-agent runs, recursively, each parent before its children."""
    runs, i = [root], 0
    while i < len(runs):
        parent = runs[i].run_id
        children: list[RunInfo] = []
        while page := await store.runs.list(
            where=RunFilter(parent_run_id=parent), limit=_PAGE, offset=len(children)
        ):
            children += page
        runs += sorted(children, key=lambda c: c.run_id)
        i += 1
    return runs


def _version() -> str:
    """The installed tether's version, for the header (what a bug report wants to know)."""
    try:
        return metadata.version("tether")
    except metadata.PackageNotFoundError:
        return "unknown"


def _sealed(blobs: BlobStore) -> bool:
    from tether.blobs.sealed import SealedBlobStore

    return isinstance(blobs, SealedBlobStore)
