"""Small asyncio pieces written once: waiting for the first of several things."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any


async def first_of(*waits: Awaitable[Any], timeout: float | None = None) -> None:  # noqa: ASYNC109
    """Wait until the first of `waits` is done (or `timeout` passes), then cancel and
    await the others: nothing is left running. What they raised is not raised here.
    (`timeout` bounds the wait for the first, not a deadline on the caller.)"""
    futures = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(futures, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for future in futures:
            future.cancel()
        await asyncio.gather(*futures, return_exceptions=True)
