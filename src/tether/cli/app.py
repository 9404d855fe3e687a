"""The `tether` command: its global options, the parser made of every command group's
(`tether.cli.commands`), and the dispatch to the chosen command's action."""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import io
import logging
import os
import sys

from tether.cli import commands
from tether.cli.common import fail
from tether.control.settings import Settings
from tether.control.wiring import open_store
from tether.foundation import faults
from tether.foundation.errors import TetherError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tether", description="A durable runtime for LLM agents.")
    parser.add_argument("--version", action="version", version=f"tether {_version()}")
    parser.add_argument("--debug", action="store_true", help="on an error, show the traceback too")
    parser.add_argument(
        "--db",
        metavar="URL|PATH",
        help="store: a URL (sqlite:///file.db, postgresql://host/db), a SQLite file's path, "
        "or a directory (its tether.db) (default: $TETHER_DATABASE_URL or sqlite in ./.tether)",
    )
    parser.add_argument(
        "--blobs",
        help="blob store URL: s3://bucket/prefix or a directory "
        "(default: $TETHER_BLOB_URL or ./blobs beside the SQLite file)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for group in commands.modules():  # one module per command group
        group.add_parser(sub)
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
        if not getattr(args, "opens_store", True):  # e.g. `db migrate`: open() would migrate
            code = args.fn(args)
            return asyncio.run(code) if inspect.iscoroutine(code) else int(code)
        return asyncio.run(_run(args, settings))
    except BaseException as exc:
        if _stdout_closed(exc):  # `tether logs RID | head -1`: the reader has had enough
            return stdout_gone()
        if not isinstance(exc, USER_ERRORS):
            raise
        # A mistake in a URL, a path, a budget or a run id: one line, no traceback.
        if args.debug:
            raise
        return fail(_one_line(exc))


def _stdout_closed(exc: BaseException) -> bool:
    """Whether `exc` is (or holds, in an exception group or as its cause) a write to a
    stdout whose reader went away."""
    if isinstance(exc, BrokenPipeError):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_stdout_closed(e) for e in exc.exceptions)
    return exc.__cause__ is not None and _stdout_closed(exc.__cause__)


def stdout_gone() -> int:
    """End quietly, as `git log | head` does: the reader closed the pipe, which is no error.
    stdout is pointed at /dev/null so the interpreter's last flush has nowhere to fail."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, io.UnsupportedOperation):
        return 0  # called in-process with stdout replaced: nothing of ours to flush
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    return 0


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
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader closed the pipe after the command's last write
        code = stdout_gone()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
