"""What one caller can make the server hold: request bodies, queued runs, starts per second.

A body over the limit is refused before it is read (its Content-Length says so) or, sent
chunked, as soon as the bytes counted while streaming pass the limit: memory never holds
more than the limit of one body. Starts are refused with 429 and Retry-After once the
queue holds `max_queued` runs or a token starts faster than its rate.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether.server.schemas import MAX_BODY_BYTES, BadRequest
from tether.store.base import Status, Store


@dataclass(frozen=True, slots=True)
class Limits:
    """The server's caps; docs/guides/serving.md documents each default."""

    max_body_bytes: int = MAX_BODY_BYTES
    # A `.tlog` file posted to /v1/runs/import (a 5,000-node run is about 1.5 MB).
    max_import_bytes: int = 64 << 20
    # Runs waiting for a worker; beyond it a start is refused (429) until workers catch up.
    max_queued: int = 1000
    # Sustained starts per second per API token, with bursts of `start_burst`.
    starts_per_s: float = 20.0
    start_burst: int = 40


class BodyTooLarge(BadRequest):
    def __init__(self, limit: int) -> None:
        super().__init__(413, "too_large", f"request body over {limit} bytes")


class BodyLimit:
    """ASGI middleware: 413 for a body over `limit` (or the limit `by_path` gives the
    request's path), decided before or while reading it."""

    def __init__(self, app: ASGIApp, limit: int, by_path: Mapping[str, int] | None = None) -> None:
        self.app = app
        self.limit = limit
        self.by_path = dict(by_path or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.by_path.get(scope["path"], self.limit)
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            # Answer without reading a byte; uvicorn then closes the connection rather
            # than drain a body nobody wants.
            await _send_413(send, limit)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise BodyTooLarge(limit)  # the route's error handler answers 413
            return message

        await self.app(scope, counted, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # h11 refuses a malformed length before we see it
    return None


async def _send_413(send: Send, limit: int) -> None:
    body = json.dumps(
        {"error": {"type": "too_large", "message": f"request body over {limit} bytes"}}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class StartGate:
    """Admission for new runs: a token bucket per API token, then the queue's length."""

    limits: Limits
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    def take(self, token: str) -> None:
        """Spend one start from `token`'s bucket; BadRequest 429 when it is empty."""
        rate, burst = self.limits.starts_per_s, self.limits.start_burst
        if rate <= 0:
            return
        now = time.monotonic()
        key = hashlib.sha256(token.encode()).hexdigest()  # never keep the secret itself
        bucket = self._buckets.setdefault(key, _Bucket(float(burst), now))
        bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.at) * rate)
        bucket.at = now
        if bucket.tokens < 1:
            wait = math.ceil((1 - bucket.tokens) / rate)
            raise TooMany(f"over {rate:g} starts per second for this token", wait)
        bucket.tokens -= 1

    async def check_queue(self, store: Store) -> None:
        """BadRequest 429 when `max_queued` runs wait already."""
        cap = self.limits.max_queued
        if cap <= 0:
            return
        # One row at offset cap-1 exists iff at least `cap` runs are queued: no count query.
        if await store.runs.list(status=Status.QUEUED, limit=1, offset=cap - 1):
            raise TooMany(f"{cap} runs are queued already; try again once workers catch up", 5)


class TooMany(BadRequest):
    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(429, "too_many_requests", message)
        self.retry_after_s = max(1, retry_after_s)
