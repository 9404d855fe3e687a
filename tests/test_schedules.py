"""Schedules from Python on every backend: checked before anything is stored, each fire
time queued once however many workers fire it, and the catch-up policies."""

from __future__ import annotations

import pytest

from tether import Runtime, Status, Store
from tether.foundation.errors import BadSchedule, ScheduleExists, UnknownAgent, UnknownSchedule
from tether.ops.schedules import GRACE, fire_run_id

AGENT = "tests.schedule_agents:tick"


@pytest.mark.parametrize(
    ("kwargs", "error", "says"),
    [
        ({"cron_expr": "* * *"}, BadSchedule, "give 5 fields"),
        ({"cron_expr": "61 * * * *"}, BadSchedule, "minute 61 is outside 0-59"),
        ({"cron_expr": "*/0 * * * *"}, BadSchedule, "step '0'"),
        ({"cron_expr": "0 0 30 feb *"}, BadSchedule, "no fire time"),
        ({"timezone": "Mars/Olympus"}, BadSchedule, "time zone 'Mars/Olympus'"),
        ({"catch_up": "all"}, BadSchedule, "catch-up 'all'"),
        ({"agent": "tests.nothing_here:agent"}, UnknownAgent, "unknown agent"),
        ({"name": "no spaces"}, BadSchedule, "schedule name"),
    ],
)
async def test_bad_input_is_refused_and_nothing_stored(
    store: Store, kwargs: dict[str, str], error: type[Exception], says: str
) -> None:
    args = {"name": "nightly", "cron_expr": "0 3 * * *", "agent": AGENT, **kwargs}
    with pytest.raises(error, match=says):
        await Runtime(store).schedules.add(args.pop("name"), **args)
    assert await store.schedules.all() == []


async def test_add_list_remove(store: Store) -> None:
    schedules = Runtime(store).schedules
    added = await schedules.add(
        "nightly", cron_expr="0 3 * * *", agent=AGENT, input={"x": 1}, timezone="Europe/Paris"
    )
    assert added.next_at > added.created_at
    with pytest.raises(ScheduleExists):
        await schedules.add("nightly", cron_expr="* * * * *", agent=AGENT)
    assert [s.name for s in await schedules.all()] == ["nightly"]
    await schedules.remove("nightly")
    with pytest.raises(UnknownSchedule):
        await schedules.remove("nightly")


async def test_each_fire_time_is_queued_once_by_any_number_of_workers(store: Store) -> None:
    workers = [Runtime(store, owner=f"w{i}").schedules for i in range(3)]
    s = await workers[0].add("often", cron_expr="*/10 * * * * *", agent=AGENT, input="hi")
    now = s.next_at + 25  # three fire times are due
    queued = [await w.fire_due(now) for w in workers]
    expected = [fire_run_id("often", s.next_at + k) for k in (0, 10, 20)]
    assert queued[0] == (expected, pytest.approx(5.0))
    assert [q for q, _ in queued[1:]] == [[], []]
    runs = await store.runs.list(status=Status.QUEUED)
    assert sorted(r.run_id for r in runs) == sorted(expected)
    graph = await Runtime(store).load(expected[0])
    assert graph.agent == AGENT


@pytest.mark.parametrize(("catch_up", "extra"), [("skip", 0), ("once", 1)])
async def test_times_missed_while_no_worker_ran(store: Store, catch_up: str, extra: int) -> None:
    schedules = Runtime(store).schedules
    s = await schedules.add("tick", cron_expr="*/10 * * * * *", agent=AGENT, catch_up=catch_up)
    now = s.next_at + 3600  # an hour down: 360 fire times
    queued, _ = await schedules.fire_due(now)
    late = [fire_run_id("tick", now - k) for k in range(int(GRACE) - 10, -1, -10)]
    missed = [fire_run_id("tick", s.next_at)] if extra else []
    assert queued == missed + late  # the ones up to a minute late fire; older ones once or never
    assert await schedules.fire_due(now) == ([], pytest.approx(10.0))
