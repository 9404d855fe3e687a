"""Finishes on PostgreSQL, grouped: the last records and releases of many runs in one commit.

A run's finish is its last record, its status and the release of its lease in one
statement (`finish`). With many runs in one process, finishes come in bursts (1,000 short
runs end within a few milliseconds); alone each is a pooled connection and a commit of
its own. `GroupCommit` (store/postgres_group.py) sends a finish alone while fewer than
`statements` are in flight and otherwise queues it for one `finish_group` statement. A run
that statement did not release (fenced off, its row locked, a taken seq anywhere in it)
finishes alone, where `finish` and the step-by-step judgement decide it, as before.
"""

from __future__ import annotations

import asyncpg

from tether.store.postgres.db import PgPool, is_unavailable
from tether.store.postgres.group import ALONE, Waiter
from tether.store.queries import load_queries

Q = load_queries("postgres")


class Finish(Waiter):
    """A run's finish: its row's new status and its last record at `seq`."""

    __slots__ = ("epoch", "reason", "record", "seq", "status", "wake_at")

    def __init__(
        self,
        run_id: str,
        epoch: int | None,
        status: str,
        reason: str | None,
        wake_at: float | None,
        seq: int,
        record: bytes,
    ) -> None:
        self.run_id = run_id
        self.rows = 1
        self.epoch = epoch
        self.status = status
        self.reason = reason
        self.wake_at = wake_at
        self.seq = seq
        self.record = record


# A finish's verdict: released with its record inserted by the shared statement.
RELEASED = 1


async def finish_together(db: PgPool, batch: list[Finish]) -> list[int]:
    """One `finish_group` statement for the batch: RELEASED for each run it released, ALONE
    for the others (and for all when the server refused the statement)."""
    args = (
        [f.run_id for f in batch],
        [f.epoch for f in batch],
        [f.status for f in batch],
        [f.reason for f in batch],
        [f.wake_at for f in batch],
        [f.seq for f in batch],
        [f.record for f in batch],
    )
    async with db.connection() as conn:
        try:
            rows = await conn.fetch(Q["finish_group"], *args)
        except asyncpg.PostgresError as exc:
            if is_unavailable(exc):
                raise
            return [ALONE] * len(batch)  # a taken seq, a deadlock: each finishes alone
    released = {row[0] for row in rows}
    return [RELEASED if f.run_id in released else ALONE for f in batch]
