"""The workers port of a store: workers advertise what they serve with their heartbeat."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Served:
    """One agent a worker serves: its code's version and the older versions it declares
    compatible (`judged`: a `compatible=` function decides run by run)."""

    version: str
    compatible: tuple[str, ...] = ()
    judged: bool = False

    def covers(self, version: str) -> bool:
        """Whether a run on `version` may move to this code (a function may still say no)."""
        return version == self.version or version in self.compatible or self.judged


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """One row of the workers table: who, where, since when, what it serves, how busy."""

    owner: str
    host: str
    pid: int
    started_at: float
    beat_at: float = 0.0
    ttl: float = 0.0
    versions: Mapping[str, Served] = field(default_factory=dict)
    runs_held: int = 0

    def versions_json(self) -> str:
        return json.dumps(
            {
                agent: {"version": s.version, "compatible": list(s.compatible), "judged": s.judged}
                for agent, s in sorted(self.versions.items())
            }
        )

    def as_dict(self, now: float) -> dict[str, Any]:
        """The JSON view (`tether workers --json`, `GET /v1/workers`)."""
        return {
            "owner": self.owner,
            "host": self.host,
            "pid": self.pid,
            "started_at": self.started_at,
            "beat_at": self.beat_at,
            "beat_age": max(0.0, now - self.beat_at),
            "ttl": self.ttl,
            "runs_held": self.runs_held,
            "versions": json.loads(self.versions_json()),
        }


def served_of(raw: str | Mapping[str, Any]) -> dict[str, Served]:
    """The `versions` column (JSON) as Served by agent."""
    data = json.loads(raw) if isinstance(raw, str) else raw
    return {
        agent: Served(v["version"], tuple(v.get("compatible", ())), bool(v.get("judged")))
        for agent, v in data.items()
    }


class Workers(ABC):
    """Live workers, each row renewed by its heartbeat; a row whose `beat_at + ttl` has
    passed is dead: not listed, and deleted by the next heartbeat of any worker."""

    @abstractmethod
    async def beat(self, info: WorkerInfo) -> None:
        """Insert or refresh this worker's row (its `beat_at` is now, the store's clock),
        and delete the rows of dead workers."""

    @abstractmethod
    async def live(self) -> list[WorkerInfo]:
        """The live workers, oldest first."""

    @abstractmethod
    async def leave(self, owner: str) -> None:
        """Delete this worker's row (it stopped)."""
