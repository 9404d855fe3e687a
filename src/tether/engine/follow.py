"""Following a run's log to its end: `follow`, and the wake-ups that drive it.

`Wakeups` wakes whoever tails a run's log when records land, wherever they were
appended. Three sources feed it: the runtime's event bus for runs executing in this
process (free), the store's LISTEN/NOTIFY listener for runs executing on other replicas
(PostgreSQL), and, for stores without one (SQLite written by another process), the
follower's own slow poll. `follow` is the one loop that tails a log (`tether logs
--follow`); `wait_finished` the one wait for a run's end (`tether cancel`, the API's
cancel), both woken by appends.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator

from tether.foundation.aio import first_of
from tether.foundation.errors import UnknownRun
from tether.foundation.status import Status
from tether.model.records import Record, decode_one
from tether.store.base import Store


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


async def follow(
    store: Store,
    run_id: str,
    *,
    after: int = -1,
    wakeups: Wakeups | None = None,
    poll: float = 1.0,
    stop: asyncio.Event | None = None,
    until_paused: bool = False,
) -> AsyncIterator[tuple[int, Record]]:
    """The records of a run's log after seq `after`, in order, as they land, until its
    last: its `RunFinished` (with `until_paused`, a `RunPaused` too, once its row says it
    stayed paused), or until `stop` is set.

    Woken by `wakeups` (an append by this process or, through the store's listener, by
    any), else every `poll` seconds. A wake-up taken before each read is never lost.
    """
    last = after
    while stop is None or not stop.is_set():
        woken = wakeups.current(run_id) if wakeups is not None else None
        rows = await store.log.read(run_id, after_seq=last)
        ended = False
        for seq, data in rows:
            record = decode_one(run_id, seq, data)
            yield seq, record
            last = seq
            ended = record.HasField("run_finished") or (
                until_paused and record.HasField("run_paused")
            )
        info = await store.runs.get(run_id)
        stays = info is not None and (
            info.status.finished or (until_paused and info.status is Status.PAUSED)
        )
        if ended and stays:
            return  # finished or paused, and nobody took it up again since
        if not rows and info is not None and info.status.finished:
            # The status changes only after the last record is recorded: one more read
            # settles whether it was missed.
            if not await store.log.read(run_id, after_seq=last):
                return
            continue
        waits: list[asyncio.Future[object]] = []
        if woken is not None:
            waits.append(asyncio.ensure_future(woken.wait()))
        if stop is not None:
            waits.append(asyncio.ensure_future(stop.wait()))
        if waits:
            await first_of(*waits, timeout=poll)
        else:
            await asyncio.sleep(poll)


async def wait_finished(
    store: Store,
    run_id: str,
    *,
    within: float,
    wakeups: Wakeups | None = None,
    poll: float = 1.0,
) -> Status:
    """The run's status once its row says it finished (its owner records that), or after
    `within` seconds: woken by its appends through `wakeups`, else every `poll` seconds.
    UnknownRun if there is no such run."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        woken = wakeups.current(run_id) if wakeups is not None else None  # before the read
        info = await store.runs.get(run_id)
        if info is None:
            raise UnknownRun(run_id)
        left = deadline - loop.time()
        if info.status.finished or left <= 0:
            return info.status
        if woken is not None:
            await first_of(woken.wait(), timeout=min(left, poll))
        else:
            await asyncio.sleep(min(left, poll))
