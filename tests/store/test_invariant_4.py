"""Invariant 4: appends are idempotent and fenced, on every backend, never a silent drop."""

from __future__ import annotations

import pytest

from tether.errors import ConflictingRecord, StaleEpoch
from tether.store import RunInfo, Status, Store


async def test_invariant_4_appends_are_idempotent_and_fenced(store: Store) -> None:
    await store.runs.create(RunInfo("r4", "agent", Status.QUEUED), b"started")
    (claim,) = await store.leases.claim("worker-a", limit=1, ttl=30)
    assert claim.run_id == "r4"
    await store.log.append("r4", [(1, b"node a")], epoch=claim.epoch)
    # A retried append of the same record is a no-op ...
    await store.log.append("r4", [(1, b"node a")], epoch=claim.epoch)
    # ... a different record at the same seq is an error ...
    with pytest.raises(ConflictingRecord):
        await store.log.append("r4", [(1, b"node b")], epoch=claim.epoch)
    # ... and once another owner holds the run, the old epoch is fenced off.
    await store.leases.release("r4", claim.epoch, Status.PAUSED, "drain")
    (again,) = await store.leases.claim("worker-b", limit=1, ttl=30)
    assert again.epoch > claim.epoch
    with pytest.raises(StaleEpoch):
        await store.log.append("r4", [(2, b"late")], epoch=claim.epoch)
    await store.log.append("r4", [(2, b"node c")], epoch=again.epoch)
    assert await store.log.read("r4") == [(0, b"started"), (1, b"node a"), (2, b"node c")]


async def test_a_stale_append_at_a_seq_the_new_owner_wrote_reports_the_fence(
    store: Store,
) -> None:
    """The zombie case: the old owner's late append names the fence, not a conflict."""
    await store.runs.create(RunInfo("z", "agent", Status.QUEUED), b"started")
    (old,) = await store.leases.claim("zombie", limit=1, ttl=30)
    await store.leases.release("z", old.epoch, Status.PAUSED, "drain")
    (new,) = await store.leases.claim("worker-b", limit=1, ttl=30)
    await store.log.append("z", [(1, b"written by the new owner")], epoch=new.epoch)
    with pytest.raises(StaleEpoch):
        await store.log.append("z", [(1, b"the zombie's late record")], epoch=old.epoch)
    assert await store.log.read("z") == [(0, b"started"), (1, b"written by the new owner")]
