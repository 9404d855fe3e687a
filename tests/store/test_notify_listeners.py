"""Append notifications go out only while a log listener is connected to the database."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from tether.store import RunInfo, Status
from tether.store.postgres import PostgresStore
from tether.store.postgres.notify import AppendNotifier


def _notifier(store: PostgresStore) -> AppendNotifier:
    return store._log._notifier


async def _settled(notifier: AppendNotifier) -> None:
    """Until the notifier's current send is over (a send still going after 10 s fails)."""
    for _ in range(1000):
        await asyncio.sleep(0.01)
        if (notifier._task is None or notifier._task.done()) and not notifier._pending:
            return
    raise AssertionError("the notifier's send was still going after 10 s")


@contextlib.asynccontextmanager
async def _listening(url: str) -> AsyncIterator[list[tuple[str | None, int]]]:
    """Another process's store listens (a `tether serve` replica): what it hears."""
    other = PostgresStore(url)
    await other.open()
    heard: list[tuple[str | None, int]] = []
    listener = other.log.listener(lambda run_id, seq: heard.append((run_id, seq)))
    await listener.start()
    try:
        yield heard
    finally:
        await listener.close()
        await other.close()


async def _until(cond: Callable[[], bool], what: str) -> None:
    for _ in range(3000):  # a bound on the wait (30 s), not a measurement
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never saw {what}")


async def test_appends_nobody_listens_to_send_no_notify_statement(
    pg_store: PostgresStore,
) -> None:
    await pg_store.runs.create(RunInfo("quiet", "agent", Status.RUNNING), b"started")
    for seq in range(1, 20):
        await pg_store.log.append("quiet", [(seq, b"r")])
        await asyncio.sleep(0)
    notifier = _notifier(pg_store)
    await _settled(notifier)
    assert notifier.listened is False
    assert notifier.statements == 0 and notifier.sent == 0
    assert notifier._recent == {"quiet": 19}  # remembered, for a listener that comes


async def test_a_new_listener_hears_what_was_appended_before_its_hello(
    pg_store: PostgresStore, pg_database: str
) -> None:
    await pg_store.runs.create(RunInfo("late", "agent", Status.RUNNING), b"started")
    await pg_store.log.append("late", [(1, b"one")])
    notifier = _notifier(pg_store)
    await _settled(notifier)
    assert notifier.listened is False
    async with _listening(pg_database) as heard:  # its hello reaches us
        await _until(lambda: ("late", 1) in heard, "the remembered append")
        assert notifier.listened is True
        await pg_store.log.append("late", [(2, b"two")])
        await _until(lambda: ("late", 2) in heard, "the next append")
        assert notifier.statements >= 2
    # Gone: the next notify statement counts no listener, and the ones after are not sent.
    await pg_store.log.append("late", [(3, b"three")])
    await _until(lambda: notifier.listened is False, "the listener's departure")
    sent = notifier.statements
    for seq in range(4, 10):
        await pg_store.log.append("late", [(seq, b"r")])
    await _settled(notifier)
    assert notifier.statements == sent


async def test_a_listener_already_there_is_counted_when_the_notifier_connects(
    pg_store: PostgresStore, pg_database: str
) -> None:
    async with _listening(pg_database) as heard:
        await pg_store.runs.create(RunInfo("early", "agent", Status.RUNNING), b"started")
        await pg_store.log.append("early", [(1, b"one")])
        await _until(lambda: ("early", 1) in heard, "the first append")
        assert _notifier(pg_store).listened is True
