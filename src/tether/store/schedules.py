"""Stored schedules: recurring runs that workers fire at their cron times.

Each row keeps how far its fire times were handled (`fired_through`) and the next one
(`next_at`); a worker that finds `next_at` due fires the times up to now and moves both on
(never back). Exactly-once firing does not rest on that cursor: a fired run's id derives
from (schedule, fire time), so a second worker's insert of the same run is refused by the
runs table.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

CATCH_UP = ("skip", "once")


@dataclass(frozen=True, slots=True)
class Schedule:
    """A schedule as stored."""

    name: str
    cron: str
    agent: str
    input: Any
    timezone: str = "UTC"
    catch_up: str = "skip"
    created_at: float = 0.0
    fired_through: float = 0.0  # every fire time up to this one was handled
    next_at: float = 0.0  # the first fire time after fired_through


def schedule_of(row: Any) -> Schedule:
    return Schedule(
        name=row[0],
        cron=row[1],
        agent=row[2],
        input=json.loads(row[3]),
        timezone=row[4],
        catch_up=row[5],
        created_at=float(row[6]),
        fired_through=float(row[7]),
        next_at=float(row[8]),
    )


def schedule_row(s: Schedule) -> tuple[Any, ...]:
    return (
        s.name,
        s.cron,
        s.agent,
        json.dumps(s.input),
        s.timezone,
        s.catch_up,
        s.created_at,
        s.fired_through,
        s.next_at,
    )


class Schedules(ABC):
    """The schedules table."""

    @abstractmethod
    async def add(self, schedule: Schedule) -> None:
        """Store a new schedule (ScheduleExists if the name is taken)."""

    @abstractmethod
    async def remove(self, name: str) -> bool:
        """Delete a schedule; False if there was none."""

    @abstractmethod
    async def all(self) -> list[Schedule]:
        """Every schedule, by name."""

    @abstractmethod
    async def due(self, now: float) -> list[Schedule]:
        """The schedules whose next fire time is at or before `now`."""

    @abstractmethod
    async def advance(self, name: str, fired_through: float, next_at: float) -> None:
        """Record that fire times up to `fired_through` were handled (never moves back)."""

    @abstractmethod
    async def next_due(self) -> float | None:
        """The earliest next fire time of any schedule (None: there are none)."""
