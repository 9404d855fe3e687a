"""Invariant 4: appends are idempotent and fenced, on every backend, never a silent drop."""

from __future__ import annotations

import pytest

from tether.foundation.errors import ConflictingRecord, StaleEpoch, UnknownRun
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


async def test_invariant_4_a_resume_record_and_its_status_land_together_or_not_at_all(
    store: Store,
) -> None:
    """`set_status(record=)`: a RunResumed and the status RUNNING in one transaction."""
    await store.runs.create(RunInfo("rs", "agent", Status.QUEUED, agent_version="v1"), b"0")
    old = await store.leases.take("rs", "zombie", 30)
    new = await store.leases.take("rs", "worker-b", 30, force=True)
    assert old is not None and new is not None and new.epoch > old.epoch
    await store.runs.set_status("rs", Status.PAUSED, epoch=new.epoch)

    async def row() -> tuple[Status, str | None, str | None]:
        info = await store.runs.get("rs")
        assert info is not None
        return info.status, info.owner, info.agent_version

    # Fenced off: neither the record nor the status (nor the version) lands.
    with pytest.raises(StaleEpoch):
        await store.runs.set_status(
            "rs", Status.RUNNING, epoch=old.epoch, version="v2", record=(1, b"resumed")
        )
    assert await row() == (Status.PAUSED, "worker-b", "v1")
    assert await store.log.read("rs") == [(0, b"0")]
    # A different record at the seq: a conflict, and the status stays as it was too.
    await store.log.append("rs", [(1, b"node")], epoch=new.epoch)
    with pytest.raises(ConflictingRecord):
        await store.runs.set_status(
            "rs", Status.RUNNING, epoch=new.epoch, version="v2", record=(1, b"resumed")
        )
    assert await row() == (Status.PAUSED, "worker-b", "v1")
    # The resume: both at once; its retry (the first attempt landed) is a no-op.
    for _ in range(2):
        await store.runs.set_status(
            "rs", Status.RUNNING, epoch=new.epoch, version="v2", record=(2, b"resumed")
        )
        assert await row() == (Status.RUNNING, "worker-b", "v2")
        assert await store.log.read("rs", after_seq=1) == [(2, b"resumed")]
    # The fenced-off owner's retry of a record that is there: still the fence, no change.
    await store.runs.set_status("rs", Status.PAUSED, epoch=new.epoch)
    with pytest.raises(StaleEpoch):
        await store.runs.set_status("rs", Status.RUNNING, epoch=old.epoch, record=(2, b"resumed"))
    assert await row() == (Status.PAUSED, "worker-b", "v2")
    # No such run: nothing is written for it.
    with pytest.raises(UnknownRun):
        await store.runs.set_status("nobody", Status.RUNNING, record=(1, b"resumed"))
    assert await store.log.read("nobody") == []
    # A run nobody leased (epoch None) resumes the same way.
    await store.runs.create(RunInfo("free", "agent", Status.PAUSED), b"0")
    await store.runs.set_status("free", Status.RUNNING, record=(1, b"resumed"))
    assert await store.log.read("free") == [(0, b"0"), (1, b"resumed")]
    info = await store.runs.get("free")
    assert info is not None and info.status is Status.RUNNING
