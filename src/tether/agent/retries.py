"""Provider errors: retry rate limits, 5xx and cut streams with backoff honouring Retry-After."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from tether.foundation.errors import TetherError

T = TypeVar("T")
log = logging.getLogger("tether.agent")
_RETRY_STATUS = {408, 409, 429}
# How long a 429 without Retry-After holds every worker's calls on the model back.
DEFAULT_BLOCK = 1.0


class ModelError(TetherError):
    """The provider refused the call for a reason no retry fixes (the message is the provider's)."""


class ModelUnavailable(TetherError):
    """The provider kept failing with retryable errors until the attempts ran out."""


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
    if any(cls.__name__ in _TRANSPORT for cls in type(exc).__mro__):
        return True, None  # includes a stream cut in the middle of a reply
    return False, None


async def with_retries(
    call: Callable[[], Awaitable[T]],
    *,
    attempts: int = 6,
    backoff: float = 0.5,
    max_backoff: float = 30.0,
    on_retry: Callable[[dict[str, Any]], None] | None = None,
) -> T:
    for attempt in range(1, attempts + 1):
        try:
            return await call()
        except Exception as exc:
            retryable, wait = classify(exc)
            message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            if not retryable:
                status, _ = _status_and_headers(exc)
                raise ModelError(
                    f"model call failed ({status or type(exc).__name__}): {message}"
                ) from exc
            if attempt == attempts:
                raise ModelUnavailable(
                    f"model call failed {attempts} times; last: {message}"
                ) from exc
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
