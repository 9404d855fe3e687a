"""Faults the local model server can inject instead of (or in the middle of) a reply.

A fault is plain data; the server decides which request gets which fault. Faults on a
`Turn` are consumed in order by the successive requests for that same conversation
state: `faults=(RateLimited(), ServerError(503))` makes the first request answer 429,
the second 503 and the third succeed. That keeps injection deterministic: it depends
only on how many times the same request was seen, never on timing.
"""

from __future__ import annotations

from dataclasses import dataclass


def _retry_headers(retry_after: float) -> dict[str, str]:
    # Retry-After is integer seconds (RFC 9110): round up so it never says "sooner than
    # asked". Both SDKs prefer the finer retry-after-ms when it is present.
    return {
        "retry-after": str(int(-(-retry_after // 1))),
        "retry-after-ms": str(round(retry_after * 1000)),
    }


@dataclass(frozen=True, slots=True)
class RateLimited:
    """Answer 429 with `Retry-After` (seconds) and `retry-after-ms` headers.

    Both SDKs prefer `retry-after-ms`, so a fractional `retry_after` (e.g. 0.01) keeps
    retrying tests fast while `Retry-After` still carries the standard integer form.
    """

    retry_after: float = 0.01
    message: str = "Rate limit reached (scripted by the local model server)."

    @property
    def status(self) -> int:
        return 429

    def headers(self) -> dict[str, str]:
        return _retry_headers(self.retry_after)


@dataclass(frozen=True, slots=True)
class ServerError:
    """Answer with a 5xx status (500, 502, 503, 529 ...) and a provider-shaped error body."""

    status: int = 500
    message: str = "Internal error (scripted by the local model server)."
    # Overloaded providers (503, 529) often say when to come back; None sends no header,
    # and the SDKs then back off on their own (about half a second).
    retry_after: float | None = None

    def __post_init__(self) -> None:
        if not 500 <= self.status <= 599:
            raise ValueError(f"ServerError status must be 5xx, got {self.status}")

    def headers(self) -> dict[str, str]:
        return {} if self.retry_after is None else _retry_headers(self.retry_after)


@dataclass(frozen=True, slots=True)
class ClientError:
    """Answer with a 4xx status other than 429: 401 (a key the provider refuses, as after a
    key rotation), 403, 404 (a model it does not know), 400 ..."""

    status: int = 401
    message: str = "Incorrect API key provided (scripted by the local model server)."

    def __post_init__(self) -> None:
        if not 400 <= self.status <= 499 or self.status == 429:
            raise ValueError(
                f"ClientError status must be 4xx other than 429 (RateLimited), got {self.status}"
            )

    def headers(self) -> dict[str, str]:
        return {}


@dataclass(frozen=True, slots=True)
class CutStream:
    """Close the connection after `after_events` SSE events of a streaming reply.

    The client sees headers and a few chunks, then the connection drops without the
    terminating chunk: exactly what a crashed or preempted upstream looks like. On a
    non-streaming request the body is cut the same way (half of it is sent).
    """

    after_events: int = 2


Fault = RateLimited | ServerError | ClientError | CutStream


def fault_name(fault: Fault | None) -> str:
    """A short label for the request log."""
    if fault is None:
        return "ok"
    if isinstance(fault, RateLimited):
        return "rate_limited"
    if isinstance(fault, ServerError):
        return f"server_error_{fault.status}"
    if isinstance(fault, ClientError):
        return f"client_error_{fault.status}"
    return "cut_stream"
