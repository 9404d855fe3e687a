"""Schedules: recurring runs of an agent at cron times, fired by workers exactly once.

`Schedules(runtime)` (also `runtime.schedules`) adds, lists and removes them and fires the
due ones. A fired run's id derives from (schedule, fire time), so when several workers
(or replicas) fire the same time, the runs table takes one run and refuses the others.
A fire time up to `GRACE` seconds late still fires (workers busy or restarting); older
ones were missed (every worker was down): the schedule's catch-up policy either skips
them (`skip`) or runs once for them all (`once`, with the first missed time's id).
Times are measured by the store's clock (PostgreSQL's, for every replica alike).
"""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tether.engine.registry import resolve_agent
from tether.foundation import cron
from tether.foundation.errors import BadSchedule, RunExists, TetherError, UnknownSchedule
from tether.store.schedules import CATCH_UP, Schedule

if TYPE_CHECKING:
    from tether.engine.runtime import Runtime

log = logging.getLogger("tether.ops.schedules")

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
GRACE = 60.0


def fire_run_id(name: str, at: float) -> str:
    """The run id of schedule `name`'s firing at `at`: `sched-NAME-20261203T101500Z`."""
    return f"sched-{name}-{datetime.fromtimestamp(at, UTC):%Y%m%dT%H%M%SZ}"


def view(s: Schedule) -> dict[str, Any]:
    """A schedule as `tether schedule list --json` and `GET /v1/schedules` show it."""
    return {
        "name": s.name,
        "cron": s.cron,
        "agent": s.agent,
        "input": s.input,
        "timezone": s.timezone,
        "catch_up": s.catch_up,
        "created_at": s.created_at,
        "next_at": s.next_at,
    }


def check_name(name: str) -> str:
    if not isinstance(name, str) or NAME.fullmatch(name) is None:
        raise BadSchedule(
            f"schedule name {name!r}: use 1 to 64 letters, digits, '_' and '-' (starting "
            "with a letter or digit)"
        )
    return name


class Schedules:
    """The schedules of a runtime's store."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.table = runtime.store.schedules

    async def add(
        self,
        name: str,
        *,
        cron_expr: str,
        agent: str,
        input: Any = None,
        timezone: str = "UTC",
        catch_up: str = "skip",
    ) -> Schedule:
        """Store a schedule after checking everything about it; nothing is stored if any of
        it is wrong (BadSchedule, UnknownAgent, BadInput; ScheduleExists for a taken name)."""
        check_name(name)
        parsed = cron.parse(cron_expr, timezone)
        if catch_up not in CATCH_UP:
            raise BadSchedule(f"catch-up {catch_up!r}: use one of {', '.join(CATCH_UP)}")
        registry = resolve_agent(agent)
        input = registry.check_input(input)
        registry.check_ready(here=False)  # its runs are queued for the workers
        try:
            json.dumps(input)
        except (TypeError, ValueError) as exc:
            raise BadSchedule(f"schedule {name!r}: its input is not JSON ({exc})") from None
        now = await self.runtime.store.runs.clock()
        schedule = Schedule(
            name=name,
            cron=cron_expr,
            agent=agent,
            input=input,
            timezone=timezone,
            catch_up=catch_up,
            created_at=now,
            fired_through=now,
            next_at=parsed.next_after(now),
        )
        await self.table.add(schedule)
        return schedule

    async def remove(self, name: str) -> None:
        """Delete a schedule (UnknownSchedule if there is none); runs it queued stay."""
        if not await self.table.remove(name):
            raise UnknownSchedule(name)

    async def all(self) -> list[Schedule]:
        """Every schedule, by name."""
        return await self.table.all()

    async def fire_due(self, now: float | None = None) -> tuple[list[str], float | None]:
        """Queue a run for every fire time due by `now` (default: the store's clock); return
        the ids this call queued and the seconds until the next fire time (None: no
        schedules)."""
        if now is None:
            now = await self.runtime.store.runs.clock()
        queued: list[str] = []
        for schedule in await self.table.due(now):
            queued += await self._fire(schedule, now)
        next_at = await self.table.next_due()
        return queued, None if next_at is None else next_at - now

    async def _fire(self, schedule: Schedule, now: float) -> list[str]:
        parsed = cron.parse(schedule.cron, schedule.timezone)
        times: list[float] = []
        at = schedule.next_at
        if at < now - GRACE:  # missed: every worker was down then
            if schedule.catch_up == "once":
                times.append(at)
            at = parsed.next_after(now - GRACE)
        while at <= now:
            times.append(at)
            at = parsed.next_after(at)
        queued: list[str] = []
        for fire_at in times:
            run_id = fire_run_id(schedule.name, fire_at)
            try:
                await self.runtime.submit(
                    schedule.agent,
                    schedule.input,
                    run_id=run_id,
                    config={"schedule": schedule.name, "fire_at": fire_at},
                )
            except RunExists:
                continue  # another worker fired it
            except TetherError as exc:
                # This worker's code cannot start it (a deploy in progress?): leave the time
                # to a worker that can, until it is missed.
                log.warning("schedule %s: cannot fire %s here (%s)", schedule.name, run_id, exc)
                return queued
            queued.append(run_id)
            log.info("schedule %s: queued run %s", schedule.name, run_id)
        await self.table.advance(schedule.name, now, at)
        return queued
