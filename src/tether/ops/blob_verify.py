"""`verify_run`: check that every blob a run's records point to is stored and intact."""

from __future__ import annotations

from dataclasses import dataclass, field

from tether.blobs.base import BlobRef, BlobStore
from tether.blobs.errors import BlobError, BlobStoreUnavailable
from tether.foundation.errors import UnknownRun
from tether.model.records import blob_refs, decode_log
from tether.model.values import ref_of
from tether.store.base import Store


@dataclass(frozen=True, slots=True)
class BadRef:
    """A ref that does not lead to its bytes: where it sits in the log and what is wrong."""

    ref: BlobRef
    seq: int
    where: str
    problem: str


@dataclass(slots=True)
class VerifyReport:
    """The refs of one run that were checked, and those that failed."""

    run_id: str
    checked: int = 0
    checked_bytes: int = 0
    bad: list[BadRef] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.bad


async def verify_run(store: Store, blobs: BlobStore, run_id: str) -> VerifyReport:
    """Read every blob the run's records point to, checking its size and sha256.

    Each distinct ref is read once, streamed (never held whole). A ref that belongs to
    another store is reported as refused, never fetched. A store that cannot be reached
    raises `BlobStoreUnavailable` instead of blaming the blob.
    """
    rows = await store.log.read_all(run_id)
    if not rows:
        raise UnknownRun(run_id)
    report = VerifyReport(run_id)
    seen: set[BlobRef] = set()
    for seq, record in enumerate(decode_log(run_id, rows)):
        for where, pb in blob_refs(record):
            ref = ref_of(pb)
            if ref in seen:
                continue
            seen.add(ref)
            report.checked += 1
            try:
                async with blobs.open(ref) as chunks:
                    async for chunk in chunks:
                        report.checked_bytes += len(chunk)
            except BlobStoreUnavailable:
                raise
            except BlobError as exc:
                report.bad.append(BadRef(ref, seq, where, f"{type(exc).__name__}: {exc}"))
    return report
