"""Server-Sent Events: a run's log records (id = seq), resumable, plus live token events.

A stream reads the log after the client's last seq, sends each record once, then waits
for a wakeup (this process's appends, PostgreSQL NOTIFY from other replicas, or a slow
poll) and reads again. It ends when the run finishes, or cleanly after a maximum duration
(below gateway timeouts) with a `retry:` hint; the client reconnects with Last-Event-ID.
Live events (tokens, node_started) carry no id, so a reconnect never skips or repeats a
record because of them, and all go by the one SSE name `live`: a handler's event cannot
pass for a durable `record`, nor say which run, node or seq it belongs to.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.model.records import decode_one
from tether.model.run_view import record_view

if TYPE_CHECKING:
    from tether.server.state import ServerState

TOKEN_QUEUE = 1000


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """How long a stream lives and how it keeps itself honest."""

    max_duration_s: float = 60.0
    # Reads the log this often with no wakeup: covers appends no listener reported
    # (another process on SQLite, a NOTIFY lost while the listener reconnected).
    poll_s: float = 1.0
    keepalive_s: float = 15.0
    retry_ms: int = 1000
    # How long POST .../cancel waits for the run's owner to record the cancellation.
    cancel_wait_s: float = 30.0


# What a reader may take for the end of a line: CR and LF (the SSE specification), and
# what Python's str.splitlines() and other lax parsers split on too.
LINE_BREAKS = ("\r", "\n", "\u2028", "\u2029", "\x85")
# json.dumps escapes CR, LF and every other control below U+0020, not these.
_UNESCAPED = (("\u2028", "\\u2028"), ("\u2029", "\\u2029"), ("\x85", "\\u0085"))


def sse_data(data: Any) -> str:
    """`data` as compact JSON on one line by any reader's rule: the line breaks JSON leaves
    raw (they can only sit inside strings) escaped as `\\uXXXX`."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    for raw, escaped in _UNESCAPED:
        if raw in text:
            text = text.replace(raw, escaped)
    return text


def _field(name: str, value: str) -> str:
    """One `name: value` line; a value that could end the line is a bug, never sent."""
    if any(c in value for c in LINE_BREAKS):
        raise ValueError(f"SSE {name or 'comment'} with a line break: {value!r}")
    return f"{name}: {value}"


def sse(
    *,
    event: str | None = None,
    data: Any = None,
    id: int | None = None,
    retry: int | None = None,
    comment: str | None = None,
) -> bytes:
    """One SSE message; `data` is sent as compact JSON on one line.

    Comments are the server's own words (never a run id, a key or any caller's text), and
    every field is checked free of line breaks, so nothing a caller or a handler wrote can
    start a line of the stream.
    """
    lines = []
    if comment is not None:
        lines.append(_field("", comment))
    if retry is not None:
        lines.append(f"retry: {int(retry)}")
    if id is not None:
        lines.append(f"id: {int(id)}")
    if event is not None:
        lines.append(_field("event", event))
    if data is not None:
        lines.append("data: " + sse_data(data))
    return ("\n".join(lines) + "\n\n").encode()


async def record_stream(
    server: ServerState, run_id: str, after: int, *, tokens: bool
) -> AsyncIterator[bytes]:
    """The body of `GET /v1/runs/{run_id}/events`."""
    settings = server.streams
    loop = asyncio.get_running_loop()
    deadline = loop.time() + settings.max_duration_s
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(TOKEN_QUEUE)
    unsubscribe = None
    if tokens:

        def on_event(rid: str, node_id: str, event: dict[str, Any]) -> None:
            if rid == run_id and not queue.full():  # tokens are best effort: drop, never block
                queue.put_nowait(live_view(rid, node_id, event))

        unsubscribe = server.runtime.events.on_event(on_event)
    closing = asyncio.ensure_future(server.closing.wait())
    token_wait = asyncio.ensure_future(queue.get())
    wake_wait: asyncio.Future[Any] | None = None
    server.streams_open += 1
    try:
        yield sse(retry=settings.retry_ms, comment=f"after seq {after}")
        last, first_read, read = after, True, True
        next_keepalive = loop.time() + settings.keepalive_s
        while True:
            if read:
                wake = server.wakeups.current(run_id)  # before reading: no lost wakeup
                rows = await server.store.log.read(run_id, after_seq=last)
                for seq, data in rows:
                    view = server.publish.view(
                        record_view(run_id, seq, decode_one(run_id, seq, data)), run_id
                    )
                    yield sse(id=seq, event="record", data=view)
                    last = seq
                    if view["body"] == "run_finished":
                        yield sse(event="end", data={"run_id": run_id, "status": view["status"]})
                        return
                if not rows and first_read and await _finished(server, run_id):
                    # The client has the finish already; the status changes only after it
                    # is recorded, so one more read settles it.
                    if not await server.store.log.read(run_id, after_seq=last):
                        yield sse(event="end", data={"run_id": run_id, "status": "finished"})
                        return
                    continue
                first_read, read = False, False
                next_poll = loop.time() + settings.poll_s
                if wake_wait is not None:
                    wake_wait.cancel()
                wake_wait = asyncio.ensure_future(wake.wait())
            now = loop.time()
            timeout = max(0.0, min(next_poll, deadline, next_keepalive) - now)
            waits: list[asyncio.Future[Any]] = [closing, wake_wait]  # type: ignore[list-item]
            if tokens:
                waits.append(token_wait)
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            now = loop.time()
            if closing.done() or now >= deadline:
                if closing.done():  # shutting down: send what the drain recorded first
                    for seq, data in await server.store.log.read(run_id, after_seq=last):
                        view = server.publish.view(
                            record_view(run_id, seq, decode_one(run_id, seq, data)), run_id
                        )
                        yield sse(id=seq, event="record", data=view)
                        last = seq
                # Not an error: the run goes on; the client reconnects where it stopped.
                yield sse(
                    retry=settings.retry_ms,
                    event="reconnect",
                    data={"run_id": run_id, "after": last},
                )
                return
            if (wake_wait is not None and wake_wait.done()) or now >= next_poll:
                # Records first: a node's node_started and tokens follow the record that
                # spawned it, since the runtime wakes us before it launches the node.
                read = True
            elif tokens and token_wait.done():
                yield sse(event=LIVE, data=token_wait.result())
                while not queue.empty():
                    yield sse(event=LIVE, data=queue.get_nowait())
                token_wait = asyncio.ensure_future(queue.get())
            elif now >= next_keepalive:
                yield sse(comment="keepalive")
                next_keepalive = now + settings.keepalive_s
    finally:
        server.streams_open -= 1
        for fut in (closing, token_wait, wake_wait):
            if fut is not None:
                fut.cancel()
        if unsubscribe is not None:
            unsubscribe()


LIVE = "live"
# Fields the server sets on a live event; the handler's own values for them are dropped.
RESERVED = frozenset({"run_id", "node_id", "seq", "id"})


def live_view(run_id: str, node_id: str, event: dict[str, Any]) -> dict[str, Any]:
    """A handler's live event as sent: its `type` kept as data, never as the SSE name."""
    kind = event.get("type")
    view = {k: v for k, v in event.items() if k not in RESERVED}
    view.update(
        type=kind if isinstance(kind, str) and kind.isidentifier() else "event",
        run_id=run_id,
        node_id=node_id,
    )
    return view


async def _finished(server: ServerState, run_id: str) -> bool:
    info = await server.store.runs.get(run_id)
    return info is not None and info.status.finished


def parse_after(last_event_id: str | None, after: str | None) -> int:
    """The seq a stream resumes after: Last-Event-ID wins (a reconnect), else ?after=.
    ASCII digits only (or -1), as `?at=`: int() also takes `+5`, `5_0`, ` 5` and other
    scripts' digits. ValueError for anything else."""
    raw = last_event_id if last_event_id not in (None, "") else after
    if raw in (None, ""):
        return -1
    assert raw is not None
    if raw == "-1":
        return -1
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 19):
        raise ValueError(raw)  # the route answers 400
    value = int(raw)
    if value > 2**62:
        raise ValueError(raw)
    return value


__all__ = [
    "LIVE",
    "StreamSettings",
    "live_view",
    "parse_after",
    "record_stream",
    "sse",
    "sse_data",
]
