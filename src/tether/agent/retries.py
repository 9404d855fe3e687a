"""Provider errors: retry rate limits, 5xx and cut streams with backoff honouring Retry-After."""

from __future__ import annotations

import asyncio
import errno
import http
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from tether.foundation.errors import ModelNotConfigured, ModelUnavailable, TetherError

T = TypeVar("T")
log = logging.getLogger("tether.agent")
_RETRY_STATUS = {408, 409, 429}
# How long a 429 without Retry-After holds every worker's calls on the model back.
DEFAULT_BLOCK = 1.0


class ModelError(TetherError):
    """The provider refused the call for a reason no retry fixes (the message is the provider's):
    the request itself (400, 413, 422 ...). The node fails, as for a handler's own error."""


# Errors that mean "the connection failed or was cut", whichever HTTP library the SDK uses
# (httpx or httpx2): matched by class name along the exception's MRO.
_TRANSPORT = {"TransportError", "APIConnectionError", "APITimeoutError"}


def _status_and_headers(exc: BaseException) -> tuple[int | None, Mapping[str, str] | None]:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if isinstance(status, int):
        return status, getattr(response, "headers", None)
    return None, None


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the provider asked us to wait (`retry-after-ms`, then `Retry-After`)."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            return max(0.0, float(raw) / scale)
        except ValueError:
            continue  # an HTTP date: fall back to our own backoff
    return None


def throttled(exc: BaseException) -> float | None:
    """For a provider's 429: the seconds it asked for (DEFAULT_BLOCK if it did not say)."""
    status, headers = _status_and_headers(exc)
    if status != 429:
        return None
    wait = retry_after(headers)
    return DEFAULT_BLOCK if wait is None else wait


def classify(exc: BaseException) -> tuple[bool, float | None]:
    """(retryable, seconds to wait if the provider said)."""
    status, headers = _status_and_headers(exc)
    if status is not None:
        return (status in _RETRY_STATUS or status >= 500), retry_after(headers)
    if _is_transport(exc):
        return True, None  # includes a stream cut in the middle of a reply
    return False, None


def _is_transport(exc: BaseException) -> bool:
    return any(cls.__name__ in _TRANSPORT for cls in type(exc).__mro__)


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception and what caused it, outermost first (an SDK error wraps the HTTP
    library's, which wraps the socket's)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def cause_of(exc: BaseException) -> tuple[str, str]:
    """(verb, cause) of a transient failure, for a person: `("unreachable", "connection
    refused")`, `("unavailable", "HTTP 503 Service Unavailable")`."""
    status, _ = _status_and_headers(exc)
    if status is not None:
        try:
            phrase = f"HTTP {status} {http.HTTPStatus(status).phrase}"
        except ValueError:
            phrase = f"HTTP {status}"
        return ("rate limited" if status == 429 else "unavailable"), phrase
    chain = _chain(exc)
    for e in chain:
        if isinstance(e, ConnectionRefusedError) or getattr(e, "errno", None) == errno.ECONNREFUSED:
            return "unreachable", "connection refused"
        if isinstance(e, socket.gaierror):
            return "unreachable", f"host name not resolved: {e.strerror or e}"
        if isinstance(e, ConnectionResetError):
            return "unreachable", "connection reset"
        if isinstance(e, TimeoutError) or "Timeout" in type(e).__name__:
            return "unreachable", "timed out"
        if isinstance(e, OSError) and e.errno is not None:
            return "unreachable", e.strerror or str(e)
    for e in chain:
        if type(e).__name__ in ("RemoteProtocolError", "ReadError"):
            return "unreachable", "connection cut mid-reply"
    last = chain[-1]
    return "unreachable", str(last) or type(last).__name__


def refused(exc: BaseException, model: str, key_variable: str | None) -> ModelNotConfigured | None:
    """A provider's answer that says the model is not configured right (a key it refuses,
    a model or endpoint it does not know), as the pause it is; None for any other."""
    status, _ = _status_and_headers(exc)
    if status not in (401, 403, 404):
        return None
    message = getattr(exc, "message", None) or str(exc)
    fix = f"set {key_variable} to a valid key" if key_variable else "give the agent a valid api_key"
    if status == 401:
        problem = f"the provider refused its API key (HTTP 401: {message}); {fix}"
    elif status == 403:
        problem = f"the provider refused access (HTTP 403: {message}); {fix}"
    else:
        problem = (
            f"the provider does not know this model or endpoint (HTTP 404: {message}); "
            "fix the model name or the base URL"
        )
    return ModelNotConfigured(model, problem + ", then resume the run", variable=key_variable)


async def with_retries(
    call: Callable[[], Awaitable[T]],
    *,
    attempts: int = 6,
    backoff: float = 0.5,
    max_backoff: float = 30.0,
    on_retry: Callable[[dict[str, Any]], None] | None = None,
    model: str = "call",
    key_variable: str | None = None,
) -> T:
    """`call()`, retried on transient errors with backoff (a provider's Retry-After wins).

    Once `attempts` are spent on transient errors, ModelUnavailable (the run pauses); a key
    the provider refuses or a model it does not know, ModelNotConfigured (the run pauses,
    naming `key_variable`); any other refusal, ModelError (the node fails). tether's own
    errors (a pause, a fence) pass through as they are.
    """
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except TetherError:
            raise
        except Exception as exc:
            retryable, wait = classify(exc)
            message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            if not retryable:
                config = refused(exc, model, key_variable)
                if config is not None:
                    raise config from exc
                status, _ = _status_and_headers(exc)
                raise ModelError(
                    f"model call failed ({status or type(exc).__name__}): {message}"
                ) from exc
            if attempt == attempts:
                verb, cause = cause_of(exc)
                raise ModelUnavailable(model, cause, attempts, verb=verb) from exc
            delay = wait if wait is not None else min(max_backoff, backoff * 2 ** (attempt - 1))
            log.info(
                "model call attempt %d failed (%s); retrying in %.2fs", attempt, message, delay
            )
            if on_retry is not None:
                on_retry(
                    {"type": "model_retry", "attempt": attempt, "delay": delay, "error": message}
                )
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")
