"""No seq holes: an owner's append must follow the log's last record (every backend).

A log that lost its tail (a failover to an asynchronous standby drops the commits of the
replication lag) must not be written past the hole by a writer whose in-memory graph still
holds the lost records: the append is refused in its own statement, LogGap naming the
run, the seq asked and the log's last seq, and nothing of it lands.
"""

from __future__ import annotations

import pytest

from tether.foundation.errors import ConflictingRecord, LogGap, StaleEpoch
from tether.store import RunInfo, Status, Store
from tether.store.forks import NewRun, Segment


def run(run_id: str, *, epoch: int = 1, status: Status = Status.RUNNING) -> RunInfo:
    return RunInfo(run_id=run_id, agent="agent", status=status, epoch=epoch)


async def lose_tail(store: Store, run_id: str, from_seq: int) -> None:
    """Delete the log's records from `from_seq` on, behind the store's back (what a standby
    promoted without them holds)."""
    url = store.url
    if url.startswith("postgresql://"):
        import asyncpg

        conn = await asyncpg.connect(url)
        try:
            await conn.execute(
                "DELETE FROM run_log WHERE run_id = $1 AND seq >= $2", run_id, from_seq
            )
        finally:
            await conn.close()
    elif url.startswith("sqlite:"):
        import sqlite3

        path = url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as conn:
            conn.execute("DELETE FROM run_log WHERE run_id = ? AND seq >= ?", (run_id, from_seq))
    else:
        logs = store.log._s.logs  # type: ignore[attr-defined]
        for seq in [s for s in logs[run_id] if s >= from_seq]:
            del logs[run_id][seq]


async def test_an_append_past_the_log_end_is_refused_and_writes_nothing(store: Store) -> None:
    await store.runs.create(run("r"), b"first")
    await store.log.append("r", [(1, b"one")], epoch=1)
    with pytest.raises(LogGap) as err:
        await store.log.append("r", [(3, b"three")], epoch=1)
    assert (err.value.run_id, err.value.seq, err.value.last_seq) == ("r", 3, 1)
    assert "seq 3" in str(err.value) and "last record is at seq 1" in str(err.value)
    with pytest.raises(LogGap):
        await store.log.append("r", [(3, b"three"), (4, b"four")], epoch=1)
    assert await store.log.read("r") == [(0, b"first"), (1, b"one")]
    # What follows lands, one record or several.
    await store.log.append("r", [(2, b"two")], epoch=1)
    await store.log.append("r", [(3, b"three"), (4, b"four")], epoch=1)
    assert [seq for seq, _ in await store.log.read("r")] == [0, 1, 2, 3, 4]


async def test_invariant_4_a_log_that_lost_its_tail_refuses_the_writer_that_still_holds_it(
    store: Store,
) -> None:
    await store.runs.create(run("r"), b"first")
    for seq in range(1, 6):
        await store.log.append("r", [(seq, b"r%d" % seq)], epoch=1)
    await lose_tail(store, "r", 4)  # the standby never had seqs 4 and 5
    with pytest.raises(LogGap) as err:
        await store.log.append("r", [(6, b"r6")], epoch=1)
    assert (err.value.seq, err.value.last_seq) == (6, 3)
    # A retry of what survived is still a no-op; a different record there still conflicts;
    # the fence still comes first.
    await store.log.append("r", [(3, b"r3")], epoch=1)
    with pytest.raises(ConflictingRecord):
        await store.log.append("r", [(3, b"other")], epoch=1)
    with pytest.raises(StaleEpoch):
        await store.log.append("r", [(6, b"r6")], epoch=0)
    # The writer that reloaded continues from the surviving prefix.
    await store.log.append("r", [(4, b"again")], epoch=1)
    assert [seq for seq, _ in await store.log.read("r")] == [0, 1, 2, 3, 4]


async def test_a_finish_or_a_resume_past_the_log_end_is_refused_and_changes_nothing(
    store: Store,
) -> None:
    await store.runs.create(run("r"), b"first")
    await store.log.append("r", [(1, b"one")], epoch=1)
    with pytest.raises(LogGap):
        await store.leases.release("r", 1, Status.SUCCEEDED, final=(3, b"finished"))
    with pytest.raises(LogGap):
        await store.runs.set_status("r", Status.RUNNING, epoch=1, record=(3, b"resumed"))
    info = await store.runs.get("r")
    assert info is not None and info.status is Status.RUNNING and info.epoch == 1
    assert await store.log.read("r") == [(0, b"first"), (1, b"one")]
    assert await store.leases.release("r", 1, Status.SUCCEEDED, final=(2, b"finished"))
    assert await store.log.read("r", after_seq=1) == [(2, b"finished")]


async def test_an_unfenced_append_is_not_held_to_the_order(store: Store) -> None:
    # Tools and tests write logs in any order (tests/store/test_contract.py); only an
    # owner's appends (fenced at its epoch: every write of an executing run) are checked.
    await store.log.append("r", [(2, b"two")])
    await store.log.append("r", [(0, b"zero"), (1, b"one")])
    assert [seq for seq, _ in await store.log.read("r")] == [0, 1, 2]


async def test_a_fork_appends_after_the_records_it_references(store: Store) -> None:
    await store.runs.create(run("src"), b"first")
    for seq in range(1, 4):
        await store.log.append("src", [(seq, b"s%d" % seq)], epoch=1)
    fork = NewRun(run("f"), b"fork's first", None, [Segment(1, 3, "src")], [])
    await store.forks.create_runs([fork])
    await store.log.append("f", [(4, b"f4")], epoch=1)  # seq 3 is src's, referenced
    with pytest.raises(LogGap) as err:
        await store.log.append("f", [(6, b"f6")], epoch=1)
    assert err.value.last_seq == 4
    assert [seq for seq, _ in await store.log.read("f")] == [0, 1, 2, 3, 4]
