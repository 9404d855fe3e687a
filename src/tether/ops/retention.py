"""Retention and erasure: prune finished runs in bounded batches, delete one run now.

A run is deleted with its sub-agent runs, log rows first (last seqs first, a few
thousand rows a transaction, so no lock on `run_log` is held for long and a pass cut
short leaves each log a valid prefix), then the run rows. The store deletes only
finished runs, in the statement itself; a family with any live member (queued, running,
paused) is skipped by `prune` and refused by `delete_run`, and so is a sub-agent run whose
parent has not finished (`ParentIsLive`). A family is marked as being deleted before any
of it goes (`Retention.seal`), so a retry cannot reopen part of it meanwhile. A run that
forks reference has those rows copied into each fork before its log goes (`remove_runs`):
forks stay readable.

Blobs are content-addressed and may be shared between runs. `prune` leaves them to
`tether blobs gc`, which deletes those no remaining run points to. `delete_run` (an
erasure request) deletes at once the blobs of the run that no other run's record points
to. The trade-off: a node of another run that puts the very same bytes between that scan
and the delete would lose them (its record's blob would then be reported missing by
`tether blobs verify`); `tether blobs gc`'s grace period does not apply to an erasure.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from tether.blobs.base import BlobStore
from tether.blobs.errors import BlobRefRefused
from tether.foundation.errors import CannotShred, ParentIsLive, RunIsLive, UnknownRun
from tether.model.records import blob_refs, decode_log
from tether.ops.blob_gc import referenced_blobs
from tether.store.base import RunInfo, Status, Store
from tether.store.retention import FINISHED, Rows

# Runs looked at per page, and log rows deleted per transaction.
DEFAULT_BATCH_RUNS = 500
DEFAULT_BATCH_ROWS = 5000


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What a prune removed (or, in a dry run, would remove)."""

    runs: int  # top-level runs
    child_runs: int  # their sub-agent runs
    rows: int  # log rows
    bytes: int  # record bytes
    skipped: int  # expired runs kept because a sub-agent run of theirs is live
    dry_run: bool
    run_ids: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class DeleteReport:
    """What deleting one run freed."""

    run_id: str
    runs: int  # the run and its sub-agent runs
    rows: int
    log_bytes: int
    blobs: int  # blobs deleted (no other run points to them)
    blob_bytes: int
    blobs_kept: int  # the run's blobs that another run still points to
    shredded: int = 0  # run keys destroyed (`shred`)


def _live_member(family: Sequence[RunInfo]) -> RunInfo | None:
    """The first member of a family that is not finished, if any."""
    return next((info for info in family if not info.status.finished), None)


def _by_root(family: Sequence[RunInfo], roots: Sequence[str]) -> dict[str, list[RunInfo]]:
    """Group a `families()` answer under the roots it was asked for."""
    parent = {info.run_id: info.parent_run_id for info in family}
    wanted = set(roots)
    groups: dict[str, list[RunInfo]] = {root: [] for root in roots}
    for info in family:
        run_id: str | None = info.run_id
        while run_id is not None and run_id not in wanted:
            run_id = parent.get(run_id)
        if run_id is not None:
            groups[run_id].append(info)
    return groups


async def remove_runs(store: Store, run_ids: Sequence[str], *, batch_rows: int) -> Rows:
    """Delete these finished runs' log rows in bounded batches, then their rows; whole
    families only (a run with every run below it). RunIsLive, with nothing deleted, if one
    of them is not finished (any more: a retry reopened it since it was looked at).

    First every one of them is marked as being deleted (`Retention.seal`, one statement):
    from then on no retry reopens any, so no family is taken apart with part of it live,
    which would leave a parent whose sub-agent run is gone, or a sub-agent run whose
    parent is. If not all could be marked, the marks are taken off and nothing goes.

    Rows that forks reference are copied into those forks first (copy-on-delete, bounded
    the same way): a fork stays readable when its source goes. Before each batch, and again
    whenever a batch finds a reference (a fork made during the delete), so the rows a fork
    references are copied out before they go; a fork whose source's rows are already gone
    is refused (`tether.store.forks`).
    """
    if await store.retention.seal(run_ids) < len(set(run_ids)):
        await store.retention.unseal(run_ids)
        family = await store.retention.families(run_ids)
        live = _live_member(family)
        first = run_ids[0]
        raise RunIsLive(
            first, live.run_id if live else first, live.status.value if live else "gone"
        )
    removed = Rows()
    while True:
        while await store.forks.detach(run_ids, limit=batch_rows) >= batch_rows:
            pass
        batch = await store.retention.delete_log(run_ids, limit=batch_rows)
        if batch is None:  # a fork of one of them was made since: copy it out first
            continue
        removed += batch
        if batch.rows < batch_rows:
            break
    await store.retention.delete_runs(run_ids)
    return removed


async def prune(
    store: Store,
    *,
    older_than: float,
    statuses: Sequence[Status] = FINISHED,
    agent: str | None = None,
    dry_run: bool = False,
    batch_runs: int = DEFAULT_BATCH_RUNS,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    now: float | None = None,
) -> PruneReport:
    """Delete top-level runs that finished more than `older_than` seconds ago, with their
    sub-agent runs; runs with a live member are skipped. `statuses` narrows which finished
    runs go (an unfinished status is refused)."""
    unfinished = [s.value for s in statuses if not s.finished]
    if unfinished:
        raise ValueError(f"only finished runs are pruned, not {', '.join(unfinished)} ones")
    if older_than <= 0 or batch_runs <= 0 or batch_rows <= 0:
        raise ValueError("older_than, batch_runs and batch_rows must be positive")
    started = time.monotonic()
    retention = store.retention
    before = (time.time() if now is None else now) - older_than
    cursor = (0.0, "")
    runs = children = skipped = 0
    removed = Rows()
    pruned: list[str] = []
    while True:
        page = await retention.expired(
            before, statuses=statuses, agent=agent, after=cursor, limit=batch_runs
        )
        if not page:
            break
        cursor = (page[-1].updated_at, page[-1].run_id)
        roots = [info.run_id for info in page]
        doomed: dict[str, list[str]] = {}
        for root, family in _by_root(await retention.families(roots), roots).items():
            if not family or _live_member(family) is not None:
                skipped += bool(family)
                continue
            doomed[root] = [info.run_id for info in family]
        ids = [run_id for family_ids in doomed.values() for run_id in family_ids]
        if ids and dry_run:
            removed += await retention.log_size(ids)
        elif ids:
            try:  # the page's families at once, as nearly always
                removed += await remove_runs(store, ids, batch_rows=batch_rows)
            except RunIsLive:  # one was reopened (a retry) since: the others one by one
                for root, family_ids in list(doomed.items()):
                    try:
                        removed += await remove_runs(store, family_ids, batch_rows=batch_rows)
                    except RunIsLive:
                        del doomed[root]
                        skipped += 1
        for family_ids in doomed.values():
            pruned.append(family_ids[0])
            runs += 1
            children += len(family_ids) - 1
        if len(page) < batch_runs:
            break
    return PruneReport(
        runs,
        children,
        removed.rows,
        removed.bytes,
        skipped,
        dry_run,
        pruned,
        time.monotonic() - started,
    )


async def _blobs_of(store: Store, blobs: BlobStore, run_ids: Sequence[str]) -> dict[str, int]:
    """sha256 -> size of every blob of `blobs` that these runs' records point to."""
    found: dict[str, int] = {}
    for run_id in run_ids:
        for record in decode_log(run_id, await store.log.read_all(run_id)):
            for _, ref in blob_refs(record):
                try:
                    found[blobs.resolve(ref.url)] = ref.size
                except BlobRefRefused:
                    continue  # not a blob of this store
    return found


async def delete_run(
    store: Store,
    run_id: str,
    *,
    blobs: BlobStore | None = None,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    shred: bool = False,
) -> DeleteReport:
    """Delete a finished run and its sub-agent runs now, and (given the blob store) the
    blobs no other run points to. UnknownRun or RunIsLive, with nothing deleted.

    With `shred`, the data keys of the run and its sub-agent runs are destroyed first
    (CannotShred, nothing deleted, if the run has none): what is left anywhere (rows a
    fork copied or references, a backup of the blob store, an exported `.tlog`) can no
    longer be opened and reads as `{"$shredded": ...}`."""
    family = await store.retention.families([run_id])
    if not family:
        raise UnknownRun(run_id)
    parent = family[0].parent_run_id
    while parent is not None:  # a sub-agent run: every run above it must have finished
        above = await store.runs.get(parent)
        if above is None:
            break
        if not above.status.finished:
            raise ParentIsLive(run_id, above.run_id, above.status.value)
        parent = above.parent_run_id
    live = _live_member(family)
    if live is not None:
        raise RunIsLive(run_id, live.run_id, live.status.value)
    ids = [info.run_id for info in family]
    shredded = 0
    if shred:
        held = await store.keys.get(ids)
        if run_id not in held:
            raise CannotShred(run_id)
        shredded = await store.keys.shred(ids)  # first: from here on nothing opens
    theirs = {} if blobs is None else await _blobs_of(store, blobs, ids)
    removed = await remove_runs(store, ids, batch_rows=batch_rows)
    deleted = freed = kept = 0
    if blobs is not None and theirs:
        _, still = await referenced_blobs(store, blobs)
        for sha256, size in theirs.items():
            if sha256 in still:
                kept += 1
                continue
            await blobs.delete(sha256)
            deleted += 1
            freed += size
    return DeleteReport(
        run_id, len(ids), removed.rows, removed.bytes, deleted, freed, kept, shredded
    )


# The advisory lock a retention pass holds: one replica at a time prunes.
RETENTION_LOCK = "retention"


async def retention_pass(store: Store, *, older_than: float) -> PruneReport | None:
    """One prune under the store-wide retention lock; None if another process holds it."""
    async with store.retention.exclusive(RETENTION_LOCK) as held:
        if not held:
            return None
        return await prune(store, older_than=older_than)
