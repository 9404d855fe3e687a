"""Cron expressions: the standard 5 fields, or 6 with a leading seconds field, in a time zone.

`minute hour day-of-month month day-of-week`, each `*`, a number, a range `a-b`, a step
`*/n` or `a-b/n`, or a comma list of those; months and weekdays also by name (`jan`,
`mon`; Sunday is 0 or 7). As in every cron, when both day fields are restricted a day
matching either fires. A leading sixth field gives seconds (`*/5 * * * * *`: every 5 s).
Aliases: `@yearly`, `@monthly`, `@weekly`, `@daily`, `@hourly`.

Times are wall-clock times in the schedule's zone: a time that a daylight-saving jump
skips does not fire that day, and a time it repeats fires once (the first).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tether.foundation.errors import BadSchedule

_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# (name, lowest, highest, names) of each field, seconds first.
_FIELDS = (
    ("second", 0, 59, ()),
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)
# How far ahead to look for a fire time before calling an expression impossible (Feb 30).
_HORIZON_DAYS = 366 * 5


def zone(name: str) -> ZoneInfo:
    """The IANA time zone `name` (BadSchedule naming it if there is none)."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise BadSchedule(
            f"time zone {name!r}: not an IANA zone such as UTC or Europe/Paris"
        ) from exc


def _number(text: str, field: tuple[str, int, int, tuple[str, ...]], expr: str) -> int:
    name, low, high, names = field
    if text.lower() in names:
        value = names.index(text.lower()) + low  # jan is 1, sun is 0
    elif text.isdigit():
        value = int(text)
    else:
        raise BadSchedule(f"cron {expr!r}: {text!r} is not a {name}")
    if not low <= value <= high:
        raise BadSchedule(f"cron {expr!r}: {name} {value} is outside {low}-{high}")
    return value


def _field(text: str, field: tuple[str, int, int, tuple[str, ...]], expr: str) -> frozenset[int]:
    name, low, high, _ = field
    values: set[int] = set()
    for part in text.split(","):
        span, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise BadSchedule(f"cron {expr!r}: step {step_text!r} of the {name} is not >= 1")
            step = int(step_text)
        if span == "*":
            first, last = low, high
        elif "-" in span:
            a, _, b = span.partition("-")
            first, last = _number(a, field, expr), _number(b, field, expr)
            if first > last:
                raise BadSchedule(f"cron {expr!r}: {name} range {span!r} runs backwards")
        else:
            first = _number(span, field, expr)
            last = high if slash else first
        values.update(range(first, last + 1, step))
    if name == "day of week" and 7 in values:  # Sunday is 0 and 7
        values = (values - {7}) | {0}
    return frozenset(values)


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed expression; `next_after(t)` is its first fire time after `t`."""

    expr: str
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 is Sunday
    any_day: bool  # day of month is `*`
    any_weekday: bool  # day of week is `*`
    tz: ZoneInfo

    def _day_matches(self, d: datetime) -> bool:
        in_month = d.day in self.days
        in_week = (d.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return in_month and in_week
        return in_month or in_week

    def next_after(self, t: float) -> float:
        """The first fire time strictly after `t` (seconds since the epoch)."""
        local = datetime.fromtimestamp(int(t) + 1, self.tz).replace(tzinfo=None)
        for _ in range(_HORIZON_DAYS):
            if local.month in self.months and self._day_matches(local):
                found = self._first_in_day(local, t)
                if found is not None:
                    return found
            local = (local + timedelta(days=1)).replace(hour=0, minute=0, second=0)
        raise BadSchedule(f"cron {self.expr!r}: no fire time in the next five years")

    def _first_in_day(self, start: datetime, after: float) -> float | None:
        for hour in sorted(h for h in self.hours if h >= start.hour):
            for minute in sorted(self.minutes):
                if (hour, minute) < (start.hour, start.minute):
                    continue
                for second in sorted(self.seconds):
                    wall = start.replace(hour=hour, minute=minute, second=second)
                    if wall < start:
                        continue
                    aware = wall.replace(tzinfo=self.tz, fold=0)
                    # A wall time a DST jump skips maps to another wall time: not this one.
                    back = aware.astimezone(UTC).astimezone(self.tz).replace(tzinfo=None)
                    if back != wall:
                        continue
                    at = aware.timestamp()
                    if at > after:
                        return at
        return None


def parse(expr: str, timezone: str = "UTC") -> Cron:
    """Parse a cron expression (BadSchedule naming what is wrong)."""
    tz = zone(timezone)
    text = _ALIASES.get(expr.strip().lower(), expr)
    parts = text.split()
    if len(parts) == 5:
        parts = ["0", *parts]
    if len(parts) != 6:
        raise BadSchedule(
            f"cron {expr!r}: give 5 fields (minute hour day month weekday) or 6 with "
            "seconds first, e.g. '*/5 * * * *'"
        )
    sec, minute, hour, day, month, weekday = (
        _field(p, f, expr) for p, f in zip(parts, _FIELDS, strict=True)
    )
    parsed = Cron(
        expr, sec, minute, hour, day, month, weekday,
        any_day=parts[3].startswith("*"), any_weekday=parts[5].startswith("*"), tz=tz,
    )  # fmt: skip
    parsed.next_after(0.0)  # one that never fires (30 February) is refused here
    return parsed
