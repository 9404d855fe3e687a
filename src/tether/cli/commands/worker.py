"""`tether worker`: execute queued and orphaned runs of this store."""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from tether.cli.common import _trace, add_log_format, demo_model_server
from tether.control.metering import metering
from tether.control.wiring import (
    DEFAULT_CONCURRENCY,
    DEFAULT_POLL,
    check_blobs,
    new_runtime,
    open_blobs,
)
from tether.engine.runtime import Runtime
from tether.foundation import logs
from tether.store import Store

ORDER = 20


def add_parser(sub: Any) -> None:
    """`tether worker`."""
    worker = sub.add_parser("worker", help="execute queued and orphaned runs of this store")
    worker.add_argument(
        "--concurrency",
        type=int,
        help=f"runs executed at once (default: $TETHER_CONCURRENCY or {DEFAULT_CONCURRENCY})",
    )
    worker.add_argument(
        "--agent",
        action="append",
        default=[],
        help="an agent to serve from the start (repeat); others are served as their runs "
        "show up, if they resolve here",
    )
    worker.add_argument(
        "--demo",
        action="store_true",
        default=None,  # None: $TETHER_DEMO (`Settings.demo`)
        help="also serve the demo agent's scripted model server, for demo runs (TETHER_DEMO=1)",
    )
    worker.add_argument(
        "--grace", type=float, default=25.0, help="seconds in-flight nodes get on SIGTERM"
    )
    worker.add_argument(
        "--lease-ttl", type=float, default=5.0, help="seconds a claim lasts unless renewed"
    )
    worker.add_argument(
        "--poll",
        type=float,
        help="seconds between looks for expired leases "
        f"(default: $TETHER_POLL or {DEFAULT_POLL:g})",
    )
    worker.add_argument(
        "--retain",
        metavar="DURATION",
        help="prune runs finished longer ago than this (e.g. 30d); one worker at a time does",
    )
    worker.add_argument(
        "--retain-every",
        type=float,
        default=600.0,
        help="seconds between retention passes (600)",
    )
    worker.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus metrics on this port (0 picks one; needs tether[metrics])",
    )
    worker.add_argument("--metrics-host", default="127.0.0.1", help="address of --metrics-port")
    worker.add_argument(
        "--no-schedules", action="store_true", help="leave firing schedules to other workers"
    )
    add_log_format(worker)
    worker.set_defaults(fn=cmd_worker)


async def cmd_worker(store: Store, args: argparse.Namespace) -> int:
    logs.configure(args.settings.log_format)
    _trace(args.settings)
    # The blob store opens now: a misconfigured one is reported at start-up, not at the
    # first run that offloads (a run queued by `tether serve` with a large input).
    async with open_blobs(args.settings) as blobs:
        await check_blobs(blobs, args.settings)
        runtime = new_runtime(store, args.settings, blobs=blobs)
        return await _work(store, args, runtime)


async def _work(store: Store, args: argparse.Namespace, runtime: Runtime) -> int:
    from tether.control.worker import Worker

    retain = None
    if args.retain:
        from tether.ops import parse_duration

        retain = parse_duration(args.retain)
    worker = Worker(
        runtime,
        concurrency=args.settings.concurrency,
        lease_ttl=args.lease_ttl,
        poll=args.settings.poll,
        retain=retain,
        retain_every=args.retain_every,
        agents=getattr(args, "agent", None) or (),
        schedules=not args.no_schedules,
    )
    # A signal handler only sets events (loop.add_signal_handler, so they reach the loop);
    # the worker decides: the first drains, a second cancels what is still in flight.
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.stop)
    if args.metrics_port is not None:
        from tether.foundation import metrics

        server = metrics.enable().serve(args.metrics_host, args.metrics_port)
        where = f"http://{args.metrics_host}:{server.server_port}/metrics"
        print(f"worker {runtime.owner} metrics on {where}", flush=True)
    async with demo_model_server(args.settings, args.settings.demo) as demo, metering(runtime):
        uses = f" (demo runs use the {demo})" if demo is not None else ""
        print(f"worker {runtime.owner} ready on {store.url.split('@')[-1]}{uses}", flush=True)
        await worker.run()
    print(f"worker {runtime.owner} stopped: {worker.statistics()}", flush=True)
    return 0
