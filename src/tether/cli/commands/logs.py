"""`tether logs RUN [--follow]`: a run's records, one line each, as they land.

Following tails the log the way the server's event streams do: woken by the store's
listener (PostgreSQL LISTEN/NOTIFY: appends by any process), else by a slow poll (SQLite
written by another process), and it ends when the run finishes or pauses.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from typing import Any, assert_never

from tether.engine.follow import Wakeups, follow
from tether.foundation.errors import UnknownRun
from tether.foundation.money import money
from tether.foundation.status import Status
from tether.model.records import Record, Value, at_us_of, body_of, decode_one
from tether.model.run_view import record_view
from tether.store import Store

# How much of a value a line shows.
PREVIEW = 60

ORDER = 50


def add_parser(sub: Any) -> None:
    """`tether logs`."""
    logs_cmd = sub.add_parser("logs", help="a run's records, one line each")
    logs_cmd.add_argument("run_id")
    logs_cmd.add_argument(
        "--follow", "-f", action="store_true", help="print records as they land, until it ends"
    )
    logs_cmd.add_argument("--json", action="store_true", help="one JSON object a record")
    logs_cmd.set_defaults(fn=cmd_logs, read_only=True)


def _value(value: Value) -> str:
    kind = value.WhichOneof("kind")
    if kind == "json":
        text = value.json.decode(errors="replace")
    elif kind == "blob":
        text = f"blob {value.blob.size} B sha256 {value.blob.sha256[:12]}"
    elif kind == "sealed":
        text = f"sealed ({value.sealed.key_id})"
    else:
        text = "null"
    return text if len(text) <= PREVIEW else text[: PREVIEW - 1] + "…"


def log_line(seq: int, record: Record) -> str:
    """One record as one line: seq, time, what happened."""
    at_us = at_us_of(record)
    at = time.strftime("%H:%M:%S", time.localtime(at_us / 1e6))
    at += f".{at_us // 1000 % 1000:03d}"
    head = f"{seq:>5} {at} "
    body = body_of(record)
    match body:
        case "run_started":
            rs = record.run_started
            parent = f" (sub-agent of {rs.parent_run_id})" if rs.parent_run_id else ""
            return head + f"started {rs.agent}{parent} input {_value(rs.input)}"
        case "node_completed":
            nc = record.node_completed
            u = nc.used
            usage = f" {u.tokens_in + u.tokens_out} tok {money(u.cost)}" if u.model_calls else ""
            spawned = f" +{len(nc.spawned)}" if nc.spawned else ""
            blobs = f" {len(nc.blobs)} blob(s)" if nc.blobs else ""
            return (
                head + f"completed {nc.kind} {nc.node_id[:8]} {u.wall_ms} ms{usage}{spawned}"
                f"{blobs} -> {_value(nc.output)}"
            )
        case "node_failed":
            nf = record.node_failed
            return (
                head + f"failed {nf.kind} {nf.node_id[:8]} attempt {nf.attempt}: "
                f"{nf.error_type}: {' '.join(nf.message.split())}"
            )
        case "step_recorded":
            sr = record.step_recorded
            return head + f"step {sr.node_id[:8]} #{sr.index} {sr.name} -> {_value(sr.output)}"
        case "run_paused":
            return head + f"paused: {record.run_paused.reason}"
        case "run_resumed":
            rr = record.run_resumed
            what = "retried (the failed run reopened)" if rr.retry else "resumed"
            return head + f"{what} by {rr.owner or '-'} at epoch {rr.epoch}"
        case "run_waiting":
            return head + f"waiting for {', '.join(record.run_waiting.keys)}"
        case "run_finished":
            rf = record.run_finished
            status = Status.from_pb(rf.status).value
            said = f": {rf.error}" if rf.error else ""
            result = f" -> {_value(rf.result)}" if rf.HasField("result") else ""
            return head + f"finished {status}{said}{result}"
        case None:
            return head + "a record of a newer schema"
        case _:
            assert_never(body)


async def cmd_logs(store: Store, args: argparse.Namespace) -> int:
    run_id = args.run_id
    if await store.runs.get(run_id) is None:
        raise UnknownRun(run_id)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # Ctrl-C ends a follow, quietly
        loop.add_signal_handler(sig, stop.set)
    wakeups = Wakeups()
    listener = store.log.listener(wakeups.on_append) if args.follow else None
    if listener is not None:
        await listener.start()
    try:
        await _tail(store, args, wakeups, stop)
    finally:
        if listener is not None:
            await listener.close()
    return 0


async def _tail(
    store: Store, args: argparse.Namespace, wakeups: Wakeups, stop: asyncio.Event
) -> None:
    if not args.follow:
        for seq, data in await store.log.read(args.run_id, after_seq=-1):
            _print(args, seq, decode_one(args.run_id, seq, data))
        return
    records = follow(
        store,
        args.run_id,
        wakeups=wakeups,
        poll=args.settings.poll,
        stop=stop,
        until_paused=True,
    )
    async for seq, record in records:
        _print(args, seq, record)


def _print(args: argparse.Namespace, seq: int, record: Record) -> None:
    if args.json:
        print(json.dumps(record_view(args.run_id, seq, record)), flush=True)
    else:
        print(log_line(seq, record), flush=True)
