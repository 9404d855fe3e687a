"""`tether signal`: deliver an event to a run's wait."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tether.control.wiring import new_runtime, open_blobs
from tether.store import Store

ORDER = 130


def add_parser(sub: Any) -> None:
    """`tether signal`."""
    sig = sub.add_parser("signal", help="deliver an event to a run's wait (e.g. an approval)")
    sig.add_argument("run_id")
    sig.add_argument("key", help="the wait's key")
    sig.add_argument("--data", help="the event's payload as JSON (default: null)")
    sig.add_argument(
        "--event-id", help="the event's id: delivering the same id again records nothing"
    )
    sig.add_argument(
        "--wait",
        type=float,
        default=30.0,
        help="seconds to wait for a run executing elsewhere to park (default 30)",
    )
    sig.set_defaults(fn=cmd_signal)


async def cmd_signal(store: Store, args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.data) if args.data is not None else None
    except json.JSONDecodeError as exc:
        raise ValueError(f"bad --data: not JSON ({exc})") from None
    async with open_blobs(args.settings) as blobs:
        runtime = new_runtime(store, args.settings, blobs=blobs)
        done = await runtime.signal(
            args.run_id, args.key, payload, event_id=args.event_id, wait_s=args.wait
        )
    if done.duplicate:
        print(f"run {done.run_id}: event for wait {done.key!r} was recorded before; nothing new")
    else:
        print(
            f"run {done.run_id}: event for wait {done.key!r} recorded at seq {done.seq}; "
            f"the run is {done.status.value}"
        )
    return 0
