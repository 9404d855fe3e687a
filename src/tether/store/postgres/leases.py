"""Leases on PostgreSQL: SKIP LOCKED claims, database-clock leases, LISTEN/NOTIFY wake-ups."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from tether.foundation.errors import StaleEpoch, StoreUnavailable
from tether.store.base import Claim, Leases, Renewal, Serves, Status, Stranded
from tether.store.postgres.db import PgPool, wrap_errors
from tether.store.postgres.finishes import RELEASED, Finish, finish_together
from tether.store.postgres.group import GroupCommit
from tether.store.postgres.log import append_final
from tether.store.queries import load_queries

Q = load_queries("postgres")
LQ = load_queries("postgres", "limits.sql")
CHANNEL = "tether_work"
# The ordered claim ranks the claim's size plus a margin of runs of each (agent, key): the
# rows SKIP LOCKED may pass over (limits.sql/claim_flow). Claims running side by side lock
# each other's first rows; claims taking turns under claim_lock meet only a `take`, a
# cancel or a status change of a single queued run.
SIDE_BY_SIDE_MARGIN = 32
TAKING_TURNS_MARGIN = 4
log = logging.getLogger("tether.store.postgres")


@functools.lru_cache(maxsize=256)
def claim_sql(size: int) -> str:
    """The claim of up to `size` runs, that size written into its text (queries.sql says
    why); $2 is `size` too. One statement per size a worker asks for, each prepared once
    per connection."""
    return Q["claim"].replace("{claim_size}", str(int(size)))


class PostgresLeases(Leases):
    def __init__(self, db: PgPool, on_appended: Callable[[str, int], None]) -> None:
        self._db = db
        # Tells the log's event streams that a finish appended a record.
        self._on_appended = on_appended
        self._listener: asyncpg.Connection | None = None
        self._woken = asyncio.Event()
        # Finishes of many runs share one statement while others are in flight.
        self._finishes: GroupCommit[Finish] = GroupCommit(
            self._finish,
            lambda batch: finish_together(db, batch),
            "finishes",
            statements=db.group_commit,
        )

    async def claim(
        self,
        owner: str,
        limit: int,
        ttl: float,
        *,
        skip: Sequence[str] = (),
        serves: Serves | None = None,
    ) -> list[Claim]:
        if limit <= 0:
            return []
        agents, versions = serves.pairs() if serves is not None else (None, None)
        also = list(serves.also) if serves is not None else []
        args = (owner, limit, ttl, list(skip), agents, versions, also)
        rows = await self._db.fetch(claim_sql(limit), *args)
        if rows and rows[-1][0] is None:  # flow control is on: claim in its order
            limited = bool(rows[-1][2])
            async with self._db.connection() as conn, conn.transaction():
                # Claims take turns while limits exist; either way claim_flow runs its
                # generic plan (limits.sql says why).
                await conn.execute(LQ["claim_lock" if limited else "claim_generic"])
                margin = TAKING_TURNS_MARGIN if limited else SIDE_BY_SIDE_MARGIN
                rows = await conn.fetch(LQ["claim_flow"], *args, margin)
        return [Claim(row[0], row[1], row[2]) for row in rows]

    async def stranded(self, serves: Serves, skip: Sequence[str], limit: int) -> list[Stranded]:
        agents, versions = serves.pairs()
        rows = await self._db.fetch(Q["stranded"], agents, versions, list(skip), limit)
        return [Stranded(row[0], row[1], row[2]) for row in rows]

    async def renew(self, owner: str, held: Sequence[Claim], ttl: float) -> Renewal:
        if not held:
            return Renewal([], [])
        ids = [c.run_id for c in held]
        rows = await self._db.fetch(Q["renew"], ids, [c.epoch for c in held], ttl, owner)
        kept = {row[0] for row in rows}
        lost = [run_id for run_id in ids if run_id not in kept]
        return Renewal(lost, [row[0] for row in rows if row[1]])

    async def release(
        self,
        run_id: str,
        epoch: int | None,
        status: Status,
        reason: str | None = None,
        *,
        final: tuple[int, bytes] | None = None,
        wake_at: float | None = None,
    ) -> bool:
        if final is None:
            return await self._release(self._db, run_id, epoch, status, reason, wake_at)
        seq, record = final
        finish = Finish(run_id, epoch, status.value, reason, wake_at, seq, record)
        if await self._finishes.submit(finish) == RELEASED:
            self._on_appended(run_id, seq)
            return True
        # Fenced off, released before, or a conflict: step by step, where the judgement
        # has the facts (and raises, rolling the transaction back).
        async with self._db.connection() as conn, conn.transaction():
            await append_final(conn, run_id, epoch, final)
            released = await self._release(conn, run_id, epoch, status, reason, wake_at)
        self._on_appended(run_id, final[0])
        return released

    async def _finish(self, f: Finish) -> int:
        """A finish alone, in one statement: RELEASED if its row was released (its record
        inserted, or there already), else 0 (for the step-by-step judgement)."""
        async with self._db.connection() as conn:
            try:  # the common finish: one statement
                rows = await conn.fetch(
                    Q["finish"], f.run_id, f.epoch, f.status, f.reason, f.wake_at, f.seq, f.record
                )
            except asyncpg.NotNullViolationError as exc:
                if exc.column_name != "seq":
                    raise
                return 0  # a different record holds the seq: nothing landed; judged after
        return RELEASED if rows and rows[0][0] else 0

    @staticmethod
    async def _release(
        db: PgPool | PoolConnectionProxy,
        run_id: str,
        epoch: int | None,
        status: Status,
        reason: str | None,
        wake_at: float | None,
    ) -> bool:
        if epoch is None:
            rows = await db.fetch(Q["release_unfenced"], run_id, status.value, reason, wake_at)
        else:
            rows = await db.fetch(Q["release"], run_id, epoch, status.value, reason, wake_at)
        return bool(rows[0][0])

    async def adopt_child(
        self, run_id: str, owner: str, parent_run_id: str, parent_epoch: int
    ) -> int:
        rows = await self._db.fetch(Q["adopt_child"], run_id, owner, parent_run_id, parent_epoch)
        if not rows:
            raise StaleEpoch(parent_run_id, parent_epoch)
        epoch: int = rows[0][0]
        return epoch

    async def take(
        self, run_id: str, owner: str, ttl: float, *, force: bool = False
    ) -> Claim | None:
        rows = await self._db.fetch(Q["take_force" if force else "take"], run_id, owner, ttl)
        return Claim(run_id, rows[0][0], rows[0][1]) if rows else None

    async def reopen(self, run_id: str, owner: str, ttl: float) -> Claim | None:
        rows = await self._db.fetch(Q["reopen"], run_id, owner, ttl)
        return Claim(run_id, rows[0][0], rows[0][1]) if rows else None

    async def request_cancel(self, run_id: str) -> Status | None:
        rows = await self._db.fetch(Q["request_cancel"], run_id)
        return Status(rows[0][0]) if rows else None

    async def next_wake(self) -> float | None:
        rows = await self._db.fetch(Q["next_wake"])
        return None if not rows or rows[0][0] is None else float(rows[0][0])

    async def notify(self) -> None:
        await self._db.execute(Q["notify"])

    async def wait_for_work(self, max_wait: float) -> None:
        # The listening connection lives outside the pool. When it is lost (a restart),
        # the next call reconnects and returns at once: a NOTIFY may have been missed.
        if self._listener is None or self._listener.is_closed():
            self._listener = None
            try:
                await self._listen()
            except StoreUnavailable as exc:
                log.warning("LISTEN %s: %s; retrying", CHANNEL, exc)
                await asyncio.sleep(min(max_wait, 1.0))
            return
        try:
            await asyncio.wait_for(self._woken.wait(), max_wait)
        except TimeoutError:
            return
        finally:
            self._woken.clear()

    async def _listen(self) -> None:
        conn = await self._db.connect_one()
        try:
            with wrap_errors(self._db.where):
                await conn.add_listener(CHANNEL, self._on_notify)
        except BaseException:
            conn.terminate()
            raise
        conn.add_termination_listener(lambda _: self._woken.set())
        self._listener = conn

    def _on_notify(self, *_: object) -> None:
        self._woken.set()

    async def close(self) -> None:
        if self._listener is not None:
            conn, self._listener = self._listener, None
            try:
                await asyncio.wait_for(conn.close(), 5)
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError):
                conn.terminate()
