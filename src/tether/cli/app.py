"""The `tether` command: argument parsing only; `tether.cli.commands` does the work."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import sys
from typing import Any

from tether.cli import (
    commands,
)
from tether.cli import (
    deploy as commands_deploy,
)
from tether.cli import (
    fork as commands_fork,
)
from tether.cli import (
    logs as commands_logs,
)
from tether.cli import (
    rates_args as cli_rates,
)
from tether.cli import (
    schedules_args as cli_schedules,
)
from tether.cli import (
    tlog as commands_tlog,
)
from tether.control.wiring import DEFAULT_CONCURRENCY, DEFAULT_POLL, Settings, open_store
from tether.engine.ownership import DEFAULT_LEASE_TTL
from tether.foundation import faults, logs
from tether.foundation.errors import TetherError
from tether.store import STATES, Status


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


def _runs_retention(runs: argparse.ArgumentParser) -> None:
    """`tether runs prune` and `tether runs delete`."""
    runs_sub = runs.add_subparsers(dest="runs_command")
    finished = [s.value for s in Status if s.finished]
    prune = runs_sub.add_parser("prune", help="delete finished runs older than a duration")
    prune.add_argument(
        "--finished-before",
        required=True,
        metavar="DURATION",
        help="delete runs that finished more than this long ago, e.g. 30d, 12h, 1d12h",
    )
    prune.add_argument(
        "--status", action="append", choices=finished, help="only runs that ended so; repeat"
    )
    prune.add_argument("--agent", help="only runs of this agent")
    prune.add_argument("--dry-run", action="store_true", help="report what would be removed")
    prune.add_argument("--list", action="store_true", help="print each removed run id")
    prune.set_defaults(fn=commands.cmd_runs_prune, read_only=False)
    delete = runs_sub.add_parser(
        "delete", help="delete a finished run, its sub-agent runs and blobs no other run uses"
    )
    delete.add_argument("run_id")
    delete.add_argument(
        "--shred",
        action="store_true",
        help="destroy the run's data key first (crypto-shredding): copies left anywhere (a "
        "fork's rows, backups of the blobs, an exported .tlog) can no longer be read",
    )
    delete.set_defaults(fn=commands.cmd_runs_delete, read_only=False)
    upgrade = runs_sub.add_parser(
        "upgrade",
        help="move a run to another version of its agent's code (the code here must be that "
        "version and able to continue it)",
    )
    upgrade.add_argument("run_id")
    upgrade.add_argument("--to", required=True, metavar="VERSION", help="the version to move to")
    upgrade.set_defaults(fn=commands_deploy.cmd_runs_upgrade, read_only=False)


def _deploys(sub: Any) -> None:
    """`tether workers` and `tether deploy check`."""
    workers = sub.add_parser("workers", help="live workers: versions served, runs held")
    workers.add_argument("--json", action="store_true")
    workers.set_defaults(fn=commands_deploy.cmd_workers, read_only=True)
    deploy = sub.add_parser("deploy", help="checks before deploying new agent code")
    deploy_sub = deploy.add_subparsers(dest="deploy_command", required=True)
    check = deploy_sub.add_parser(
        "check",
        help="list in-flight runs the agent code here could not continue; exit 1 if any",
    )
    check.add_argument("agent", help="agent name, module:attribute, or tether.agents entry point")
    check.add_argument("--json", action="store_true")
    check.set_defaults(fn=commands_deploy.cmd_deploy_check, read_only=True)


def _export_and_import(sub: Any) -> None:
    """`tether export`, `tether import` and `tether check` (.tlog files)."""
    export = sub.add_parser(
        "export", help="write a run, its sub-agent runs (and blobs) to a .tlog file"
    )
    export.add_argument("run_id")
    export.add_argument("-o", "--output", required=True, help="the file to write (- : stdout)")
    export.add_argument(
        "--with-blobs", action="store_true", help="include the blobs the records point to"
    )
    export.set_defaults(fn=commands_tlog.cmd_export, read_only=True)
    imp = sub.add_parser("import", help="load a .tlog file into this store (all or nothing)")
    imp.add_argument("file")
    imp.set_defaults(fn=commands_tlog.cmd_import, read_only=False)
    check = sub.add_parser(
        "check",
        help="check saved .tlog runs against the agent code here (handlers, input shapes); "
        "exit 1 if any fails",
    )
    check.add_argument("agent", help="agent name, module:attribute, or tether.agents entry point")
    check.add_argument("paths", nargs="+", metavar="FILE_OR_DIR")
    check.set_defaults(fn=None)


def _fork_and_history(sub: Any) -> None:
    fork = sub.add_parser("fork", help="a new queued run from a run's history; prints its id")
    fork.add_argument("run_id")
    point = fork.add_mutually_exclusive_group(required=True)
    point.add_argument("--at", type=int, metavar="SEQ", help="keep the records up to this seq")
    point.add_argument(
        "--before", metavar="NODE_ID", help="keep the records before this node's record"
    )
    fork.add_argument(
        "--set",
        action="append",
        metavar="NODE_ID=JSON",
        help="replace the output of a node completed by then (repeatable)",
    )
    fork.add_argument(
        "--input",
        action="append",
        metavar="NODE_ID=JSON",
        help="replace the input of a node pending then (repeatable)",
    )
    fork.add_argument("--budget", help="new limits; +N adds, e.g. tokens=+50000")
    fork.add_argument("--run", action="store_true", help="execute the fork here now")
    fork.add_argument("--quiet", action="store_true", help="no live progress display (--run)")
    fork.add_argument(
        "--lease-ttl", type=float, default=DEFAULT_LEASE_TTL, help="lease of --run (seconds)"
    )
    fork.add_argument("--grace", type=float, default=25.0, help="seconds in-flight nodes get")
    fork.set_defaults(fn=commands_fork.cmd_fork)
    _export_and_import(sub)
    history = sub.add_parser("history", help="a run's records as checkpoints to fork from")
    history.add_argument("run_id")
    history.add_argument("--json", action="store_true")
    history.set_defaults(fn=commands_fork.cmd_history, read_only=True)


def _log_format(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--log-format",
        choices=logs.FORMATS,
        help="text, or one JSON object a line with run_id, node_id, owner, epoch "
        "(default: $TETHER_LOG_FORMAT or text)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tether", description="A durable runtime for LLM agents.")
    parser.add_argument("--version", action="version", version=f"tether {_version()}")
    parser.add_argument("--debug", action="store_true", help="on an error, show the traceback too")
    parser.add_argument(
        "--db", help="store URL (default: $TETHER_DATABASE_URL or sqlite in ./.tether)"
    )
    parser.add_argument(
        "--blobs",
        help="blob store URL: s3://bucket/prefix or a directory "
        "(default: $TETHER_BLOB_URL or ./blobs beside the SQLite file)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="run the demo agent on a scripted model")
    demo.add_argument("--question", default="How do agents survive a rolling deploy?")
    demo.add_argument("--stop-after", type=int, help="SIGKILL the process after N recorded nodes")
    demo.add_argument("--budget", help="limits, e.g. nodes=8,tokens=5000")
    demo.add_argument(
        "--approve",
        action="store_true",
        help="the calc tool asks for approval: a y/n prompt, or (not at a terminal) the "
        "run parks and prints the `tether signal` command that answers it",
    )
    demo.set_defaults(fn=commands.cmd_demo)

    resume = sub.add_parser("resume", help="continue a paused or interrupted run")
    resume.add_argument("run_id")
    resume.add_argument("--budget", help="new limits; +N adds, e.g. tokens=+50000")
    resume.add_argument("--stop-after", type=int, help="SIGKILL the process after N recorded nodes")
    taking = resume.add_mutually_exclusive_group()
    taking.add_argument(
        "--wait", action="store_true", help="if another process owns the run, wait for its lease"
    )
    taking.add_argument(
        "--force",
        action="store_true",
        help="take the run over now, even from a live owner (fenced: its next append fails)",
    )
    resume.set_defaults(fn=commands.cmd_resume)
    retry = sub.add_parser(
        "retry",
        help="reopen a failed run: its failed nodes run again (new attempts), then it continues",
    )
    retry.add_argument("run_id")
    retry.add_argument(
        "--queue",
        action="store_true",
        help="record the retry and leave the run queued for a worker instead of executing it here",
    )
    retry.add_argument("--stop-after", type=int, help="SIGKILL the process after N recorded nodes")
    retry.set_defaults(fn=commands.cmd_retry)
    cancel = sub.add_parser("cancel", help="stop a run for good (its owner records it)")
    cancel.add_argument("run_id")
    cancel.add_argument(
        "--wait", type=float, default=30.0, help="seconds to wait for the owner to stop it (30)"
    )
    cancel.set_defaults(fn=commands.cmd_cancel)
    for p in (demo, resume, retry, cancel):
        p.add_argument(
            "--lease-ttl",
            type=float,
            default=DEFAULT_LEASE_TTL,
            help="seconds this process's lease on a run lasts unless renewed "
            f"({DEFAULT_LEASE_TTL:g}); a crashed run is taken over after it",
        )
    for p in (demo, resume, retry):
        p.add_argument("--speed", type=float, help="demo latency multiplier (0 = instant)")
        p.add_argument(
            "--model",
            help="demo model, e.g. openai:gpt-4.1 (needs OPENAI_API_KEY); default: scripted",
        )
        p.add_argument(
            "--grace", type=float, default=25.0, help="seconds in-flight nodes get on SIGTERM"
        )
        p.add_argument("--quiet", action="store_true", help="no live progress display")

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
    _log_format(worker)
    worker.set_defaults(fn=commands.cmd_worker)

    submit = sub.add_parser("submit", help="queue a run for the workers; prints its id")
    submit.add_argument("agent", help="agent name, module:attribute, or tether.agents entry point")
    submit.add_argument("--input", help="the run's input as JSON")
    submit.add_argument("--budget", help="limits, e.g. nodes=8,tokens=5000")
    submit.add_argument("--run-id", help="the run's id (default: a new one)")
    submit.add_argument(
        "--key", help="its concurrency key (a tenant, a user): `tether limits set --key` caps it"
    )
    submit.add_argument(
        "--priority", type=int, default=0, help="claimed before lower ones (default 0)"
    )
    submit.set_defaults(fn=commands.cmd_submit)

    runs = sub.add_parser(
        "runs", help="list runs, newest first, sub-agent runs under their parent; prune or delete"
    )
    runs.add_argument(
        "--status", choices=STATES, help="only runs in it (orphaned: running, lease ran out)"
    )
    runs.add_argument("--agent", help="only runs of this agent")
    runs.add_argument("--limit", type=int, default=50, help="at most this many runs (50)")
    runs.add_argument("--json", action="store_true", help="one JSON array of runs")
    runs.set_defaults(fn=commands.cmd_runs, read_only=True)
    _runs_retention(runs)

    logs_cmd = sub.add_parser("logs", help="a run's records, one line each")
    logs_cmd.add_argument("run_id")
    logs_cmd.add_argument(
        "--follow", "-f", action="store_true", help="print records as they land, until it ends"
    )
    logs_cmd.add_argument("--json", action="store_true", help="one JSON object a record")
    logs_cmd.set_defaults(fn=commands_logs.cmd_logs, read_only=True)

    show = sub.add_parser("show", help="a run's graph, status, budget and timings")
    show.add_argument("run_id")
    show.add_argument("--json", action="store_true", help="stable JSON (see README)")
    show.add_argument("--outputs", action="store_true", help="include node outputs in --json")
    show.add_argument(
        "--at", type=int, metavar="SEQ", help="the run as it was once the record at SEQ was"
    )
    show.set_defaults(fn=commands.cmd_show, read_only=True)

    _fork_and_history(sub)
    _deploys(sub)
    cli_rates.add_limits(sub)
    cli_schedules.add_schedule(sub)

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
    sig.set_defaults(fn=commands.cmd_signal)

    blobs = sub.add_parser("blobs", help="the blob store: garbage collection, checks")
    blobs_sub = blobs.add_subparsers(dest="blobs_command", required=True)
    gc = blobs_sub.add_parser("gc", help="delete blobs that no record points to")
    gc.add_argument(
        "--grace",
        type=float,
        default=3600.0,
        help="keep unreferenced blobs younger than this many seconds (in-flight nodes); "
        "default 3600, must exceed your longest node",
    )
    gc.add_argument("--dry-run", action="store_true", help="report what would be freed")
    gc.set_defaults(fn=commands.cmd_blobs_gc)
    verify = blobs_sub.add_parser("verify", help="check every blob a run points to")
    verify.add_argument("run_id")
    verify.set_defaults(fn=commands.cmd_blobs_verify, read_only=True)

    srv = sub.add_parser("serve", help="the HTTP API and live run pages")
    srv.add_argument(
        "--demo",
        action="store_true",
        default=None,  # None: $TETHER_DEMO (`Settings.demo`)
        help="also serve the demo agent's scripted model server, for demo runs (TETHER_DEMO=1)",
    )
    srv.add_argument("--host", default="127.0.0.1")
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
    srv.add_argument("--log-level", default="warning")
    _log_format(srv)
    _serve_limits(srv)
    srv.set_defaults(fn=commands.cmd_serve)

    keys = sub.add_parser("keys", help="encryption at rest: key rings ($TETHER_KEYS)")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    generate = keys_sub.add_parser(
        "generate", help="print a new key ring, or $TETHER_KEYS plus a new current key"
    )
    generate.add_argument("--id", help="the new key's id (default: k1, k2, ...)")
    generate.set_defaults(fn=None)
    rotate = keys_sub.add_parser(
        "rotate", help="re-seal stored blobs under the current key (logs are never rewritten)"
    )
    rotate.add_argument(
        "--reseal-blobs", dest="blobs_too", action="store_true", help="re-seal every blob now"
    )
    rotate.set_defaults(fn=commands.cmd_keys_rotate)

    db = sub.add_parser("db", help="database schema")
    db_sub = db.add_subparsers(dest="db_command", required=True)
    migrate = db_sub.add_parser("migrate", help="apply pending migrations")
    migrate.add_argument(
        "--partitions",
        type=int,
        default=None,
        metavar="N",
        help="PostgreSQL: hash-partition run_log by run_id into N tables (1: one plain "
        "table); the log is copied in one transaction",
    )
    migrate.set_defaults(fn=None)
    _global_options_everywhere(parser)
    return parser


def _global_options_everywhere(
    parser: argparse.ArgumentParser, globals_: list[argparse.Action] | None = None
) -> None:
    """`--db` and `--blobs` work after the subcommand too (`tether runs --db X`): every
    subcommand accepts them, and one given there wins over one given before it."""
    if globals_ is None:
        globals_ = [a for a in parser._actions if a.dest in ("db", "blobs")]
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for sub in action.choices.values():
            for g in globals_:
                sub.add_argument(
                    *g.option_strings, dest=g.dest, default=argparse.SUPPRESS, help=g.help
                )
            _global_options_everywhere(sub, globals_)


def main(argv: list[str] | None = None) -> int:
    """Run one `tether` command; return its exit code."""
    args = build_parser().parse_args(argv)
    try:
        # Settings are read once, here; commands get them as `args.settings`.
        args.settings = settings = Settings.from_args(args)
        args.keys = settings.keys
        if settings.fault:
            faults.plan(settings.fault)
        if args.command == "keys" and args.keys_command == "generate":
            return commands.cmd_keys_generate(args)
        if args.command == "db":  # migrating must not go through open(), which migrates
            return asyncio.run(commands.cmd_migrate(args))
        if args.command == "check":  # reads files, not a store
            return asyncio.run(commands_tlog.cmd_check(args))
        return asyncio.run(_run(args, settings))
    except USER_ERRORS as exc:
        # A mistake in a URL, a path, a budget or a run id: one line, no traceback.
        if args.debug:
            raise
        return commands.fail(_one_line(exc))


# What a user's mistake raises (a bad URL or path, a missing extra, an unknown run);
# anything else is a bug, and keeps its traceback.
USER_ERRORS = (TetherError, ValueError, OverflowError, OSError, ImportError)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    if isinstance(exc, OSError) and not isinstance(exc, ConnectionError):
        # A data directory that cannot be made or written (read-only, or a bad path).
        text += "; set TETHER_DATA_DIR or pass --db (and --blobs) to a writable place"
    return text


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tether")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


async def _run(args: argparse.Namespace, settings: Settings) -> int:
    # Read-only commands never create a database or a schema (`Store.open_existing`).
    async with open_store(settings, read_only=getattr(args, "read_only", False)) as store:
        code: int = await args.fn(store, args)
        return code


def freeze_imports() -> None:
    """Keep the cyclic collector off what the process has imported (`gc.freeze`): modules,
    classes and functions live as long as the process, yet a fresh process's first full
    collections walk every one of them, and one fell inside `tether resume`'s window from
    the command's start to the run's first node (issue 12: 60-120 ms under load on SQLite,
    when a 5,000-node load takes 40). For a process of its own, as `entry` is."""
    gc.freeze()


def entry() -> None:
    """The console script: run the command, then leave without finalizing the interpreter.

    obstore's Rust runtime (the S3 blob store) can abort with SIGABRT while the interpreter
    finalizes; everything is flushed and closed by then, so skip finalization. Only for a
    process of its own: in-process callers use `main()`, which returns.
    """
    freeze_imports()
    code = main()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
