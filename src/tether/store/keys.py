"""Per-run data keys: each run that has one keeps it here, wrapped (sealed) by the key ring.

A row holds the run's 256-bit data key sealed under a key of the ring
(`tether.foundation.crypto.runkeys`); the store never sees a key in the clear. Shredding a
run (`tether runs delete --shred`) empties its row and stamps when: whatever still holds the
run's sealed values or blobs (a fork's rows, a copy of the blob store, an exported `.tlog`)
can no longer be opened, and readers show it as shredded. Rows are small and outlive an
ordinary delete, since a fork's copied rows stay sealed under the source's key.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KeyRow:
    """A run's wrapped data key, or (shredded) None and when it was shredded."""

    run_id: str
    wrapped: bytes | None
    shredded_at: float | None = None


def fetcher(keys: RunKeys) -> Callable[[str], Awaitable[tuple[bytes | None, float | None] | None]]:
    """What a `RunKeyBox` fetches a run's wrapped key with: (wrapped or None, shredded_at),
    or None if the store has no row for the run."""

    async def fetch(run_id: str) -> tuple[bytes | None, float | None] | None:
        row = (await keys.get([run_id])).get(run_id)
        return None if row is None else (row.wrapped, row.shredded_at)

    return fetch


class RunKeys(ABC):
    @abstractmethod
    async def put(self, run_id: str, wrapped: bytes) -> bool:
        """Store a run's wrapped key unless it has a row (kept or shredded); True if stored."""

    @abstractmethod
    async def get(self, run_ids: Sequence[str]) -> dict[str, KeyRow]:
        """The rows of these runs that exist."""

    @abstractmethod
    async def kept(self) -> list[KeyRow]:
        """Every run key not shredded (to wrap them again under a rotated ring)."""

    @abstractmethod
    async def rewrap(self, run_id: str, old: bytes, new: bytes) -> bool:
        """Replace a run's wrapped key, if it is still `old` (not shredded or rewrapped since)."""

    @abstractmethod
    async def shred(self, run_ids: Sequence[str]) -> int:
        """Destroy these runs' keys (their rows stay, emptied and stamped); how many held one."""
