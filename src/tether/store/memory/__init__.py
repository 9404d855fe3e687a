"""An in-process store with the same rules as the durable ones (for benchmarks of the hot path)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace

from tether.foundation import clock
from tether.foundation.errors import RunExists, StaleEpoch, UnknownRun
from tether.store.base import (
    DRAIN,
    EVERY_RUN,
    ORPHANED,
    Claim,
    Leases,
    LogStore,
    Renewal,
    RunFilter,
    RunInfo,
    RunTable,
    Serves,
    Status,
    Store,
    Stranded,
)
from tether.store.forks import (
    ForkTable,
    NewRun,
    Origin,
    Segment,
    last_rows,
    plan_copies,
    source_gone,
)
from tether.store.judgement import AppendFacts, judge_append
from tether.store.limits import Candidate, claim_order
from tether.store.memory.flow import (
    MemoryKeys,
    MemoryLimits,
    MemoryRates,
    MemorySchedules,
    held_slots,
    served_at,
)
from tether.store.retention import FINISHED, Retention, Rows
from tether.store.workers import WorkerInfo, Workers


class _State:
    def __init__(self) -> None:
        self.logs: dict[str, dict[int, bytes]] = {}
        self.runs: dict[str, RunInfo] = {}
        self.cancels: set[str] = set()  # the runs_table's cancel_requested flag
        self.wake_at: dict[str, float] = {}  # the runs table's wake_at column, when set
        self.refs: dict[str, list[Segment]] = {}  # a fork's references (run_refs)
        self.origins: dict[str, Origin] = {}  # where a fork came from (run_forks)


class MemoryLog(LogStore):
    def __init__(self, state: _State) -> None:
        self._s = state

    async def append(
        self, run_id: str, entries: Sequence[tuple[int, bytes]], *, epoch: int | None = None
    ) -> None:
        log = self._s.logs.setdefault(run_id, {})
        info = self._s.runs.get(run_id)
        current = info.epoch if info is not None else None
        if epoch is None and len(entries) == 1:
            seq, record = entries[0]
            if seq not in log:  # the common unfenced append: nothing to judge
                log[seq] = record
                return
        elif current == epoch and len(entries) == 1:
            seq, record = entries[0]
            if seq not in log and (seq == 0 or seq - 1 in log or self._referenced(run_id, seq - 1)):
                log[seq] = record  # the common append: one new record that follows the log
                return
        # What the SQL stores' insert does: skip taken seqs, or everything when fenced off;
        # fenced, each row only if the one before it is held.
        fresh: dict[int, bytes] = {}
        last = None
        if epoch is None:
            for seq, record in entries:
                if seq not in log:
                    fresh.setdefault(seq, record)
        elif current == epoch:
            for seq, record in entries:
                held = seq == 0 or seq - 1 in log or seq - 1 in fresh
                if seq not in log and (held or self._referenced(run_id, seq - 1)):
                    fresh.setdefault(seq, record)
            if len(fresh) < len(entries):
                refs = self._s.refs.get(run_id, ())
                last = max([-1, *log, *(s.to_seq for s in refs)])
        stored = {seq: log.get(seq, fresh.get(seq)) for seq, _ in entries}
        facts = AppendFacts(
            len(fresh), {seq: r for seq, r in stored.items() if r is not None}, current, last
        )
        judge_append(run_id, entries, epoch, facts)
        log.update(fresh)

    def _referenced(self, run_id: str, seq: int) -> bool:
        """Whether a fork's ranges cover `seq`."""
        return any(s.from_seq <= seq <= s.to_seq for s in self._s.refs.get(run_id, ()))

    async def read(self, run_id: str, *, after_seq: int = -1) -> list[tuple[int, bytes]]:
        log = self._s.logs.get(run_id, {})
        rows = [(seq, log[seq]) for seq in log if seq > after_seq]
        for seg in self._s.refs.get(run_id, ()):
            source = self._s.logs.get(seg.source_run_id, {})
            rows += [
                (seq, source[seq])
                for seq in range(max(seg.from_seq, after_seq + 1), seg.to_seq + 1)
                if seq in source
            ]
        return sorted(rows)


class MemoryRuns(RunTable):
    def __init__(self, state: _State, log: MemoryLog) -> None:
        self._s = state
        self._log = log

    async def create(
        self, info: RunInfo, first_record: bytes, *, lease_s: float | None = None
    ) -> None:
        if info.run_id in self._s.runs:
            raise RunExists(info.run_id)
        now = clock.now()  # creation time orders claims; tests set it
        lease_until = None if lease_s is None else time.time() + lease_s
        self._s.runs[info.run_id] = replace(
            info, created_at=now, updated_at=now, lease_until=lease_until
        )
        self._s.logs[info.run_id] = {0: first_record}

    async def get(self, run_id: str) -> RunInfo | None:
        return self._s.runs.get(run_id)

    async def set_status(
        self,
        run_id: str,
        status: Status,
        *,
        reason: str | None = None,
        epoch: int | None = None,
        wake_at: float | None = None,
        version: str | None = None,
        record: tuple[int, bytes] | None = None,
    ) -> None:
        info = self._s.runs.get(run_id)
        if info is None:
            raise UnknownRun(run_id)
        if epoch is not None and info.epoch != epoch:
            raise StaleEpoch(run_id, epoch)
        if record is not None:  # judged before anything changes; nothing awaits in between
            await self._log.append(run_id, [record], epoch=epoch)
        info = replace(info, status=status, reason=reason, updated_at=time.time())
        self._s.runs[run_id] = replace(info, agent_version=version or info.agent_version)
        _set_wake(self._s, run_id, wake_at)

    async def list(
        self,
        *,
        status: Status | None = None,
        where: RunFilter = EVERY_RUN,
        limit: int = 100,
        offset: int = 0,
    ) -> list[RunInfo]:
        rows = sorted(self._s.runs.values(), key=lambda r: (-r.created_at, r.run_id))
        now = time.time()  # leases are timed by this clock, as in the SQLite store
        rows = [
            r for r in rows if (status is None or r.status == status) and _admits(where, r, now)
        ]
        return rows[offset : offset + limit]


def _admits(where: RunFilter, info: RunInfo, now: float) -> bool:
    return (
        (where.orphaned is None or (info.state(now) == ORPHANED) == where.orphaned)
        and (where.agent is None or info.agent == where.agent)
        and (where.run_id_prefix is None or info.run_id.startswith(where.run_id_prefix))
        and (where.parent_run_id is None or info.parent_run_id == where.parent_run_id)
        and not (where.top_level and info.parent_run_id is not None)
    )


def _set_wake(state: _State, run_id: str, wake_at: float | None) -> None:
    if wake_at is None:
        state.wake_at.pop(run_id, None)
    else:
        state.wake_at[run_id] = wake_at


def _runnable(state: _State, info: RunInfo, now: float) -> bool:
    if info.parent_run_id is not None:
        return False
    if info.status is Status.WAITING:
        return state.wake_at.get(info.run_id, now + 1) <= now
    if info.status is Status.QUEUED:
        return True
    if info.status is Status.PAUSED:
        return info.reason == DRAIN and (info.lease_until is None or info.lease_until < now)
    return info.status is Status.RUNNING and info.lease_until is not None and info.lease_until < now


class MemoryLeases(Leases):
    def __init__(self, state: _State, log: MemoryLog, limits: MemoryLimits) -> None:
        self._s = state
        self._log = log
        self._limits = limits
        self._woken = asyncio.Event()

    async def claim(
        self,
        owner: str,
        limit: int,
        ttl: float,
        *,
        skip: Sequence[str] = (),
        serves: Serves | None = None,
    ) -> list[Claim]:
        now = time.time()
        found = [
            Candidate(r.run_id, r.agent, r.key or "", r.priority, r.created_at)
            for r in self._runnable(skip, now)
            if serves is None or serves.admits(r.run_id, r.agent, r.agent_version)
        ]
        limits = self._limits.current()
        order = found  # oldest first: the order while no limit, key or priority is set
        if limits.rows or any(c.key or c.priority for c in found):
            runs = self._s.runs.values()
            order = claim_order(found, held_slots(runs, now), limits, served_at(runs))
        claims = []
        for c in order[: max(limit, 0)]:
            info = self._s.runs[c.run_id]
            self._s.runs[info.run_id] = replace(
                info,
                status=Status.RUNNING,
                reason=None,
                owner=owner,
                epoch=info.epoch + 1,
                lease_until=now + ttl,
                updated_at=now,
            )
            claims.append(Claim(info.run_id, info.epoch + 1, info.run_id in self._s.cancels))
        return claims

    def _runnable(self, skip: Sequence[str], now: float) -> list[RunInfo]:
        skipped = set(skip)
        return sorted(
            (
                r
                for r in self._s.runs.values()
                if r.run_id not in skipped and _runnable(self._s, r, now)
            ),
            key=lambda r: r.created_at,
        )

    async def stranded(self, serves: Serves, skip: Sequence[str], limit: int) -> list[Stranded]:
        return [
            Stranded(r.run_id, r.agent, r.agent_version)
            for r in self._runnable(skip, time.time())
            if not serves.admits(r.run_id, r.agent, r.agent_version)
        ][: max(limit, 0)]

    async def take(
        self, run_id: str, owner: str, ttl: float, *, force: bool = False
    ) -> Claim | None:
        info, now = self._s.runs.get(run_id), time.time()
        if info is None or info.parent_run_id is not None or info.status.finished:
            return None
        unleased = info.lease_until is None or info.lease_until < now
        takeable = (Status.QUEUED, Status.PAUSED, Status.WAITING, Status.RUNNING)
        if info.status not in takeable or (not force and not unleased):
            return None
        if not force and info.status is Status.RUNNING and info.lease_until is None:
            return None  # as the SQL stores: running needs an expired lease
        self._s.runs[run_id] = replace(
            info,
            status=Status.RUNNING,
            reason=None,
            owner=owner,
            epoch=info.epoch + 1,
            lease_until=now + ttl,
            updated_at=now,
        )
        return Claim(run_id, info.epoch + 1, run_id in self._s.cancels)

    async def reopen(self, run_id: str, owner: str, ttl: float) -> Claim | None:
        info, now = self._s.runs.get(run_id), time.time()
        if info is None or info.parent_run_id is not None or info.status is not Status.FAILED:
            return None
        if run_id in self._s.cancels:  # being deleted (`Retention.seal`)
            return None
        self._s.runs[run_id] = replace(
            info,
            status=Status.RUNNING,
            reason=None,
            owner=owner,
            epoch=info.epoch + 1,
            lease_until=now + ttl,
            updated_at=now,
        )
        return Claim(run_id, info.epoch + 1, run_id in self._s.cancels)

    async def request_cancel(self, run_id: str) -> Status | None:
        info = self._s.runs.get(run_id)
        if info is None:
            return None
        if not info.status.finished:
            self._s.cancels.add(run_id)
        return info.status

    async def renew(self, owner: str, held: Sequence[Claim], ttl: float) -> Renewal:
        lost, cancel = [], []
        for c in held:
            info = self._s.runs.get(c.run_id)
            if info is None or info.epoch != c.epoch or info.owner != owner:
                lost.append(c.run_id)
                continue
            self._s.runs[c.run_id] = replace(info, lease_until=time.time() + ttl)
            if c.run_id in self._s.cancels:
                cancel.append(c.run_id)
        return Renewal(lost, cancel)

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
        if final is not None:  # nothing awaits in between: one transaction
            await self._log.append(run_id, [final], epoch=epoch)
        info = self._s.runs.get(run_id)
        if info is None or (epoch is not None and info.epoch != epoch):
            return False
        self._s.runs[run_id] = replace(
            info, status=status, reason=reason, owner=None, lease_until=None, updated_at=time.time()
        )
        _set_wake(self._s, run_id, wake_at)
        if (status is Status.PAUSED and reason == DRAIN) or status is Status.QUEUED:
            self._woken.set()
        if status is Status.WAITING and wake_at is not None:
            self._woken.set()
        return True

    async def adopt_child(
        self, run_id: str, owner: str, parent_run_id: str, parent_epoch: int
    ) -> int:
        parent, info = self._s.runs.get(parent_run_id), self._s.runs.get(run_id)
        if parent is None or parent.epoch != parent_epoch:
            raise StaleEpoch(parent_run_id, parent_epoch)
        if info is None:
            raise UnknownRun(run_id)
        self._s.runs[run_id] = replace(info, owner=owner, epoch=info.epoch + 1)
        return info.epoch + 1

    async def next_wake(self) -> float | None:
        runs = self._s.runs
        due = [
            at
            for run_id, at in self._s.wake_at.items()
            if runs[run_id].status is Status.WAITING and runs[run_id].parent_run_id is None
        ]
        return min(due) - time.time() if due else None

    async def notify(self) -> None:
        self._woken.set()

    async def wait_for_work(self, max_wait: float) -> None:
        try:
            await asyncio.wait_for(self._woken.wait(), max_wait)
        except TimeoutError:
            return
        finally:
            self._woken.clear()


def _id(info: RunInfo) -> str:
    return info.run_id


class MemoryRetention(Retention):
    def __init__(self, state: _State) -> None:
        self._s = state
        self._locks: set[str] = set()

    async def expired(
        self,
        before: float,
        *,
        statuses: Sequence[Status] = FINISHED,
        agent: str | None = None,
        after: tuple[float, str] = (0.0, ""),
        limit: int = 100,
    ) -> list[RunInfo]:
        found = [
            r
            for r in self._s.runs.values()
            if r.parent_run_id is None
            and r.status.finished
            and r.status in statuses
            and r.updated_at < before
            and (agent is None or r.agent == agent)
            and (r.updated_at, r.run_id) > after
        ]
        return sorted(found, key=lambda r: (r.updated_at, r.run_id))[:limit]

    async def families(self, run_ids: Sequence[str]) -> list[RunInfo]:
        found = sorted((self._s.runs[i] for i in set(run_ids) if i in self._s.runs), key=_id)
        level = [r.run_id for r in found]
        while level:
            below = sorted((r for r in self._s.runs.values() if r.parent_run_id in level), key=_id)
            found += below
            level = [r.run_id for r in below]
        return found

    async def log_size(self, run_ids: Sequence[str]) -> Rows:
        logs = [self._s.logs.get(run_id, {}) for run_id in run_ids]
        return Rows(sum(map(len, logs)), sum(len(r) for log in logs for r in log.values()))

    async def delete_log(self, run_ids: Sequence[str], *, limit: int) -> Rows | None:
        sources = set(run_ids)
        if any(s.source_run_id in sources for segs in self._s.refs.values() for s in segs):
            return None
        gone = Rows()
        for run_id in sorted(run_ids):
            info, log = self._s.runs.get(run_id), self._s.logs.get(run_id, {})
            if info is None or not info.status.finished:
                continue
            for seq in sorted(log, reverse=True)[: limit - gone.rows]:
                gone += Rows(1, len(log.pop(seq)))
        return gone

    async def seal(self, run_ids: Sequence[str]) -> int:
        # As the SQL stores do: the cancel flag, meaningless on a finished run, is the mark.
        marked = 0
        for run_id in run_ids:
            info = self._s.runs.get(run_id)
            if info is not None and info.status.finished:
                self._s.cancels.add(run_id)
                marked += 1
        return marked

    async def unseal(self, run_ids: Sequence[str]) -> None:
        for run_id in run_ids:
            info = self._s.runs.get(run_id)
            if info is not None and info.status.finished:
                self._s.cancels.discard(run_id)

    async def delete_runs(self, run_ids: Sequence[str]) -> int:
        done = 0
        for run_id in run_ids:
            info = self._s.runs.get(run_id)
            if info is not None and info.status.finished:
                del self._s.runs[run_id]
                self._s.logs.pop(run_id, None)
                self._s.cancels.discard(run_id)
                self._s.wake_at.pop(run_id, None)
                self._s.refs.pop(run_id, None)
                self._s.origins.pop(run_id, None)
                done += 1
        return done

    @contextlib.asynccontextmanager
    async def exclusive(self, name: str) -> AsyncIterator[bool]:
        if name in self._locks:
            yield False
            return
        self._locks.add(name)
        try:
            yield True
        finally:
            self._locks.discard(name)


class MemoryForks(ForkTable):
    def __init__(self, state: _State, runs: MemoryRuns, log: MemoryLog) -> None:
        self._s = state
        self._runs = runs
        self._log = log

    async def create_runs(self, runs: Sequence[NewRun]) -> None:
        # Every id is checked before anything is written, and nothing awaits in between:
        # one transaction.
        seen: set[str] = set()
        for run in runs:
            if run.info.run_id in self._s.runs or run.info.run_id in seen:
                raise RunExists(run.info.run_id)
            seen.add(run.info.run_id)
            for source, seq in last_rows(run.segments):
                if seq not in self._s.logs.get(source, {}):
                    raise source_gone(source, exists=source in self._s.runs)
        for run in runs:
            await self._runs.create(run.info, run.first_record)
            self._s.logs[run.info.run_id].update(run.entries)
            self._s.refs[run.info.run_id] = sorted(run.segments)
            if run.origin is not None:
                self._s.origins[run.info.run_id] = run.origin

    async def rows_at(self, run_id: str, seqs: Sequence[int]) -> dict[int, bytes]:
        wanted = set(seqs)
        return {seq: r for seq, r in await self._log.read(run_id) if seq in wanted}

    async def segments(self, run_id: str) -> list[Segment]:
        return list(self._s.refs.get(run_id, ()))

    async def origins(self, run_ids: Sequence[str]) -> dict[str, Origin]:
        return {i: self._s.origins[i] for i in run_ids if i in self._s.origins}

    async def forks_of(self, run_id: str) -> list[str]:
        return sorted(
            i for i, segs in self._s.refs.items() if any(s.source_run_id == run_id for s in segs)
        )

    async def detach(self, run_ids: Sequence[str], *, limit: int) -> int:
        sources = set(run_ids)
        refs = [
            (run_id, s.from_seq, s.to_seq, s.source_run_id)
            for run_id in sorted(self._s.refs)
            for s in self._s.refs[run_id]
            if s.source_run_id in sources
        ]
        copies = plan_copies(refs, limit)
        for c in copies:
            source, log = self._s.logs.get(c.source_run_id, {}), self._s.logs[c.run_id]
            log.update((s, source[s]) for s in range(c.from_seq, c.to_seq + 1) if s in source)
            segs = self._s.refs[c.run_id]
            (seg,) = [s for s in segs if s.from_seq == c.from_seq]
            segs.remove(seg)
            if c.rest_from is not None:
                segs.append(Segment(c.rest_from, seg.to_seq, seg.source_run_id))
            segs.sort()
        return sum(c.to_seq - c.from_seq + 1 for c in copies)


class MemoryWorkers(Workers):
    def __init__(self) -> None:
        self._rows: dict[str, WorkerInfo] = {}

    async def beat(self, info: WorkerInfo) -> None:
        now = time.time()
        old = self._rows.get(info.owner)
        started = old.started_at if old is not None else info.started_at
        self._rows[info.owner] = replace(info, started_at=started, beat_at=now)
        for owner, row in list(self._rows.items()):
            if row.beat_at + row.ttl < now:
                del self._rows[owner]

    async def live(self) -> list[WorkerInfo]:
        now = time.time()
        rows = [r for r in self._rows.values() if r.beat_at + r.ttl >= now]
        return sorted(rows, key=lambda r: (r.started_at, r.owner))

    async def leave(self, owner: str) -> None:
        self._rows.pop(owner, None)


class MemoryStore(Store):
    """`memory:` — nothing survives the process."""

    def __init__(self) -> None:
        self.url = "memory:"
        state = _State()
        self.log = MemoryLog(state)
        self.runs = MemoryRuns(state, self.log)
        self.limits = MemoryLimits(state.runs)
        self.leases = MemoryLeases(state, self.log, self.limits)
        self.retention = MemoryRetention(state)
        self.forks = MemoryForks(state, self.runs, self.log)
        self.workers = MemoryWorkers()
        self.rates = MemoryRates()
        self.keys = MemoryKeys()
        self.schedules = MemorySchedules()

    async def open(self) -> None:
        return None

    async def open_existing(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def migrate(self) -> list[str]:
        return []
