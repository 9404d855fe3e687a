"""The cron parser: fields, names, steps, day OR-rule, seconds, aliases, time zones, DST."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tether.foundation import cron
from tether.foundation.errors import BadSchedule


def times(expr: str, start: datetime, n: int = 3, tz: str = "UTC") -> list[str]:
    c, t, out = cron.parse(expr, tz), start.timestamp(), []
    for _ in range(n):
        t = c.next_after(t)
        out.append(datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S"))
    return out


START = datetime(2026, 12, 3, 10, 7, 30, tzinfo=UTC)  # a Thursday


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("*/5 * * * *", ["2026-12-03 10:10:00", "2026-12-03 10:15:00", "2026-12-03 10:20:00"]),
        ("*/20 * * * * *", ["2026-12-03 10:07:40", "2026-12-03 10:08:00", "2026-12-03 10:08:20"]),
        ("0 9 * * mon-fri", ["2026-12-04 09:00:00", "2026-12-07 09:00:00", "2026-12-08 09:00:00"]),
        ("0 0 13 * FRI", ["2026-12-04 00:00:00", "2026-12-11 00:00:00", "2026-12-13 00:00:00"]),
        ("30 6 1 jan,jul *", ["2027-01-01 06:30:00", "2027-07-01 06:30:00", "2028-01-01 06:30:00"]),
        ("@hourly", ["2026-12-03 11:00:00", "2026-12-03 12:00:00", "2026-12-03 13:00:00"]),
        ("0 12 * * 7", ["2026-12-06 12:00:00", "2026-12-13 12:00:00", "2026-12-20 12:00:00"]),
        ("5-10/5 10 3 12 *", ["2026-12-03 10:10:00", "2027-12-03 10:05:00", "2027-12-03 10:10:00"]),
    ],
)
def test_next_fire_times(expr: str, expected: list[str]) -> None:
    assert times(expr, START) == expected


def test_a_zones_wall_clock_and_its_daylight_saving_jumps() -> None:
    # Paris jumps from 02:00 to 03:00 on 29 March 2026: 02:30 does not exist that day.
    paris = times("30 2 * * *", datetime(2026, 3, 28, tzinfo=UTC), tz="Europe/Paris")
    assert paris == ["2026-03-28 01:30:00", "2026-03-30 00:30:00", "2026-03-31 00:30:00"]
    # New York repeats 01:00-02:00 on 1 November 2026: 01:30 fires once.
    ny = times("30 1 * * *", datetime(2026, 10, 31, tzinfo=UTC), tz="America/New_York")
    assert ny == ["2026-10-31 05:30:00", "2026-11-01 05:30:00", "2026-11-02 06:30:00"]


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("* * * *", "give 5 fields"),
        ("* * * * * * *", "give 5 fields"),
        ("60 * * * *", "minute 60 is outside 0-59"),
        ("* 24 * * *", "hour 24 is outside 0-23"),
        ("* * 0 * *", "day of month 0 is outside 1-31"),
        ("* * * 13 *", "month 13 is outside 1-12"),
        ("* * * * 8", "day of week 8 is outside 0-7"),
        ("* * * foo *", "'foo' is not a month"),
        ("*/x * * * *", "step 'x'"),
        ("10-5 * * * *", "runs backwards"),
        ("0 0 31 2 *", "no fire time"),
    ],
)
def test_bad_expressions_say_what_is_wrong(expr: str, says: str) -> None:
    with pytest.raises(BadSchedule, match=says):
        cron.parse(expr)


def test_an_unknown_time_zone_is_named() -> None:
    with pytest.raises(BadSchedule, match="time zone 'Nowhere/Land'"):
        cron.parse("* * * * *", "Nowhere/Land")
