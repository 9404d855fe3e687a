"""In-process fan-out of records as they are appended, and of non-durable events (tokens)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tether.model.records import Record

log = logging.getLogger("tether.engine.bus")

RecordListener = Callable[[str, int, Record], None]
EventListener = Callable[[str, str, dict[str, Any]], None]


class EventBus:
    """Listeners are plain callables: they run inline and must not block."""

    def __init__(self) -> None:
        self.record_listeners: list[RecordListener] = []
        self.event_listeners: list[EventListener] = []

    def on_record(self, fn: RecordListener) -> Callable[[], None]:
        """Call `fn(run_id, seq, record)` after each record is durable and applied; returns
        what stops it (callable from a listener: the lists are replaced, never changed
        while `record` or `emit` walks them)."""
        return self._listen("record_listeners", fn)

    def on_event(self, fn: EventListener) -> Callable[[], None]:
        """Call `fn(run_id, node_id, event)` for each non-durable event (stopped as
        `on_record` says)."""
        return self._listen("event_listeners", fn)

    def _listen(self, listeners: str, fn: Callable[..., None]) -> Callable[[], None]:
        """Add `fn` to the list named `listeners` by replacing it; return what takes it out."""
        setattr(self, listeners, [*getattr(self, listeners), fn])

        def stop() -> None:
            setattr(self, listeners, [f for f in getattr(self, listeners) if f is not fn])

        return stop

    def record(self, run_id: str, seq: int, record: Record) -> None:
        for fn in self.record_listeners:
            try:
                fn(run_id, seq, record)
            except Exception:  # a broken listener must not stop a run
                log.exception("record listener %r failed", fn)

    def emit(self, run_id: str, node_id: str, event: dict[str, Any]) -> None:
        for fn in self.event_listeners:
            try:
                fn(run_id, node_id, event)
            except Exception:
                log.exception("event listener %r failed", fn)
