"""`tether serve`: the HTTP API and live run pages."""

from __future__ import annotations

import argparse
import contextlib
import logging
from typing import Any

from tether.cli.common import _trace, add_log_format, demo_model_server
from tether.control.wiring import DEFAULT_CONCURRENCY, DEFAULT_POLL, new_runtime, open_blobs
from tether.engine.registry import resolve_agent
from tether.foundation import logs
from tether.store import Store

ORDER = 150


def add_parser(sub: Any) -> None:
    """`tether serve`."""
    srv = sub.add_parser("serve", help="the HTTP API and live run pages")
    srv.add_argument(
        "--demo",
        action="store_true",
        default=None,  # None: $TETHER_DEMO (`Settings.demo`)
        help="also serve the demo agent's scripted model server, for demo runs (TETHER_DEMO=1)",
    )
    srv.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface)",
    )
    srv.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    srv.add_argument("--token", help="API bearer token (default: $TETHER_API_TOKEN)")
    srv.add_argument(
        "--agent",
        action="append",
        help="an agent callers may start (name or module:attribute); repeat; default: demo",
    )
    srv.add_argument(
        "--max-stream", type=float, default=60.0, help="seconds an event stream lasts (60)"
    )
    srv.add_argument(
        "--poll",
        type=float,
        help="streams read the log at least this often "
        f"(seconds; default: $TETHER_POLL or {DEFAULT_POLL:g})",
    )
    srv.add_argument("--grace", type=float, default=25.0, help="seconds nodes get on SIGTERM")
    srv.add_argument(
        "--workers",
        choices=["embedded", "external"],
        help="who executes runs: a worker in this process, or `tether worker` processes "
        "(default: embedded on SQLite, external on PostgreSQL)",
    )
    srv.add_argument(
        "--concurrency",
        type=int,
        help="runs the embedded worker executes at once "
        f"(default: $TETHER_CONCURRENCY or {DEFAULT_CONCURRENCY})",
    )
    srv.add_argument(
        "--lease-ttl",
        type=float,
        default=5.0,
        help="seconds a lease lasts without renewal (embedded worker; server's own claims)",
    )
    srv.add_argument("--speed", type=float, help="demo latency multiplier (0 = instant)")
    srv.add_argument(
        "--log-level",
        default="warning",
        help="uvicorn's log level: debug, info, warning (default), error or critical",
    )
    add_log_format(srv)
    _serve_limits(srv)
    srv.set_defaults(fn=cmd_serve)


def _serve_limits(srv: argparse.ArgumentParser) -> None:
    """`tether serve`'s caps; defaults come from the dataclasses README documents."""
    from tether.server.connections import ConnectionLimits
    from tether.server.limits import Limits
    from tether.server.session import DEFAULT_TTL_S

    conn, lim = ConnectionLimits(), Limits()
    limits = srv.add_argument_group("limits")
    limits.add_argument(
        "--header-timeout",
        type=float,
        default=conn.header_timeout_s,
        help=f"seconds a request's headers may take ({conn.header_timeout_s:g})",
    )
    limits.add_argument(
        "--idle-timeout",
        type=float,
        default=conn.idle_timeout_s,
        help=f"seconds an idle keep-alive connection stays open ({conn.idle_timeout_s:g})",
    )
    limits.add_argument(
        "--body-timeout",
        type=float,
        default=conn.body_timeout_s,
        help=f"seconds a request's body may take, from its headers ({conn.body_timeout_s:g})",
    )
    limits.add_argument(
        "--body-read-timeout",
        type=float,
        default=conn.body_read_timeout_s,
        help="seconds a request's body may send nothing while it is read "
        f"({conn.body_read_timeout_s:g})",
    )
    limits.add_argument(
        "--max-connections",
        type=int,
        default=conn.max_connections,
        help=f"connections at once, event streams included; beyond: 503 ({conn.max_connections})",
    )
    limits.add_argument(
        "--max-body",
        type=int,
        default=lim.max_body_bytes,
        help=f"largest request body in bytes; beyond: 413 ({lim.max_body_bytes})",
    )
    limits.add_argument(
        "--max-import",
        type=int,
        default=lim.max_import_bytes,
        help=f"largest .tlog file POST /v1/runs/import takes, in bytes ({lim.max_import_bytes})",
    )
    limits.add_argument(
        "--max-queued",
        type=int,
        default=lim.max_queued,
        help=f"queued runs beyond which starts get 429; 0 = no cap ({lim.max_queued})",
    )
    limits.add_argument(
        "--starts-per-second",
        type=float,
        default=lim.starts_per_s,
        help=f"sustained starts per second per token; 0 = no cap ({lim.starts_per_s:g})",
    )
    limits.add_argument(
        "--start-burst",
        type=int,
        default=lim.start_burst,
        help=f"starts a token may make at once above that rate ({lim.start_burst})",
    )
    limits.add_argument(
        "--session-ttl",
        type=float,
        default=DEFAULT_TTL_S,
        help=f"seconds a live page's session cookie lasts ({DEFAULT_TTL_S:g})",
    )


async def cmd_serve(store: Store, args: argparse.Namespace) -> int:
    import secrets

    from tether.server import ConnectionLimits, Launcher, Limits, StreamSettings, TetherServer
    from tether.server.auth import check_token
    from tether.server.serve import serve

    token = args.settings.api_token
    generated = not token
    token = token or secrets.token_urlsafe(24)
    check_token(token)  # before anything starts: a short token is refused, not served
    if logs.log_format(args.settings.log_format) == "json":
        logs.configure("json", logging.getLevelName(args.log_level.upper()))
    agents = args.agent or ["demo"]
    with contextlib.suppress(ImportError):  # /metrics answers 404 without the extra
        from tether.foundation import metrics

        metrics.enable()
    _trace(args.settings)
    for name in agents:  # import them now: a bad name fails here, and adopted runs find theirs
        resolve_agent(name)
    async with open_blobs(args.settings) as blobs:
        runtime = new_runtime(store, args.settings, blobs=blobs)
        # Either way the server only queues runs; embedded, a worker in this process claims
        # them (and takes up runs a previous server left behind, once their leases run out).
        mode = args.workers or ("embedded" if store.url.startswith("sqlite:") else "external")
        if mode == "embedded":
            launcher = Launcher.embedded(
                runtime, concurrency=args.settings.concurrency, lease_ttl=args.lease_ttl
            )
        else:
            launcher = Launcher(runtime, lease_ttl=args.lease_ttl)
        server = TetherServer(
            store,
            launcher,
            token=token,
            blobs=blobs,
            agents=agents,
            streams=StreamSettings(max_duration_s=args.max_stream, poll_s=args.settings.poll),
            limits=Limits(
                max_body_bytes=args.max_body,
                max_import_bytes=args.max_import,
                max_queued=args.max_queued,
                starts_per_s=args.starts_per_second,
                start_burst=args.start_burst,
            ),
            session_ttl_s=args.session_ttl,
        )
        connections = ConnectionLimits(
            header_timeout_s=args.header_timeout,
            idle_timeout_s=args.idle_timeout,
            body_timeout_s=args.body_timeout,
            body_read_timeout_s=args.body_read_timeout,
            max_connections=args.max_connections,
        )

        def ready(url: str) -> None:
            where = store.url.split("@")[-1]
            print(f"tether serve: listening on {url} (store {where}, workers {mode})", flush=True)
            if generated:
                print(f"API token: {token} (set TETHER_API_TOKEN or --token)", flush=True)

        # The embedded worker may be handed demo runs: with --demo it serves their model.
        models = demo_model_server(args.settings, args.settings.demo and mode == "embedded")
        async with models:
            await serve(
                server,
                args.host,
                args.port,
                on_ready=ready,
                log_level=args.log_level,
                connections=connections,
            )
    print("tether serve: stopped", flush=True)
    return 0
