"""Wake the event streams tailing a run's log when records land, wherever they were appended.

Three sources feed it: the runtime's event bus for runs executing in this process (free),
the store's LISTEN/NOTIFY listener for runs executing on other replicas (PostgreSQL), and,
for stores without one (SQLite written by another process), the streams' own slow poll.
"""

from __future__ import annotations

import asyncio
import weakref

from tether.model.records import Record


class Wakeups:
    """One event per run, shared by every stream tailing it, replaced after each wake.

    A stream takes `current(run_id)` before it reads the log and waits on it after: an
    append that lands between the read and the wait has already set that event, so no
    wakeup is lost. Events live as long as a stream holds them (weak values).
    """

    def __init__(self) -> None:
        self._events: weakref.WeakValueDictionary[str, asyncio.Event] = (
            weakref.WeakValueDictionary()
        )
        self.woken = 0

    def current(self, run_id: str) -> asyncio.Event:
        event = self._events.get(run_id)
        if event is None:
            event = self._events[run_id] = asyncio.Event()
        return event

    def wake(self, run_id: str | None) -> None:
        """Records of `run_id` landed (None: any run's may have; the listener reconnected)."""
        if run_id is None:
            events = list(self._events.values())
            self._events.clear()
        else:
            one = self._events.pop(run_id, None)
            events = [] if one is None else [one]
        for event in events:
            self.woken += 1
            event.set()

    def on_record(self, run_id: str, seq: int, record: Record) -> None:
        """An EventBus record listener (appends by this process)."""
        self.wake(run_id)

    def on_append(self, run_id: str | None, seq: int) -> None:
        """A store LogListener callback (appends by any process)."""
        self.wake(run_id)
