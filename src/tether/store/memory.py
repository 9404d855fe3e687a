"""An in-process store with the same rules as the durable ones (for benchmarks of the hot path)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from tether.errors import ConflictingRecord, RunExists, StaleEpoch, UnknownRun
from tether.store.base import LogStore, RunInfo, RunTable, Status, Store


class _State:
    def __init__(self) -> None:
        self.logs: dict[str, dict[int, bytes]] = {}
        self.runs: dict[str, RunInfo] = {}


class MemoryLog(LogStore):
    def __init__(self, state: _State) -> None:
        self._s = state

    async def append(
        self, run_id: str, entries: Sequence[tuple[int, bytes]], *, epoch: int | None = None
    ) -> None:
        log = self._s.logs.setdefault(run_id, {})
        fresh: dict[int, bytes] = {}
        for seq, record in entries:
            old = log.get(seq, fresh.get(seq))
            if old is not None and old != record:
                raise ConflictingRecord(run_id, seq)
            if old is None:
                fresh[seq] = record
        # Like the SQL stores: a retry of records already there is a no-op even when fenced.
        if fresh and epoch is not None:
            info = self._s.runs.get(run_id)
            if info is None or info.epoch != epoch:
                raise StaleEpoch(run_id, epoch)
        log.update(fresh)

    async def read(self, run_id: str, *, after_seq: int = -1) -> list[tuple[int, bytes]]:
        log = self._s.logs.get(run_id, {})
        return [(seq, log[seq]) for seq in sorted(log) if seq > after_seq]


class MemoryRuns(RunTable):
    def __init__(self, state: _State) -> None:
        self._s = state

    async def create(self, info: RunInfo, first_record: bytes) -> None:
        if info.run_id in self._s.runs:
            raise RunExists(info.run_id)
        now = time.time()
        self._s.runs[info.run_id] = replace(info, created_at=now, updated_at=now)
        self._s.logs[info.run_id] = {0: first_record}

    async def get(self, run_id: str) -> RunInfo | None:
        return self._s.runs.get(run_id)

    async def set_status(self, run_id: str, status: Status, *, reason: str | None = None) -> None:
        info = self._s.runs.get(run_id)
        if info is None:
            raise UnknownRun(run_id)
        self._s.runs[run_id] = replace(info, status=status, reason=reason, updated_at=time.time())

    async def list(
        self, *, status: Status | None = None, limit: int = 100, offset: int = 0
    ) -> list[RunInfo]:
        rows = sorted(self._s.runs.values(), key=lambda r: (-r.created_at, r.run_id))
        rows = [r for r in rows if status is None or r.status == status]
        return rows[offset : offset + limit]


class MemoryStore(Store):
    """`memory:` — nothing survives the process."""

    def __init__(self) -> None:
        self.url = "memory:"
        state = _State()
        self.log = MemoryLog(state)
        self.runs = MemoryRuns(state)

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def migrate(self) -> list[str]:
        return []
