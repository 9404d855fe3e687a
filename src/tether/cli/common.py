"""What the `tether` command's groups (`tether.cli.commands`) share: the console, one-line
errors, and executing a run in this process with the live display.

Every command gets its store from `tether.cli.app`, its settings from
`tether.control.settings`, and its blobs and runtime from `tether.control.wiring`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rich.console import Console

from tether.control.wiring import Settings, new_runtime, open_blobs
from tether.engine.executor import Outcome
from tether.engine.registry import resolve_agent
from tether.engine.runtime import Runtime
from tether.foundation import logs, tracing
from tether.foundation.errors import UnknownAgent
from tether.model.graph import Graph
from tether.model.records import Record
from tether.model.run_view import waits_view
from tether.store import Status, Store


class _Console(Console):
    def on_broken_pipe(self) -> None:
        # rich would exit 1; the entry point ends a command whose reader went away with 0,
        # whichever way it printed (`tether.cli.app.stdout_gone`).
        self.quiet = True
        raise BrokenPipeError


console = _Console()


def count(n: int, noun: str) -> str:
    """`n` and its noun, plural unless one: `1 run`, `2 runs`, `0 files`, `1 sub-agent run`."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def fail(message: str) -> int:
    """Say what went wrong in one line on stderr; the exit code of a user's mistake."""
    print(f"error: {message}", file=sys.stderr, flush=True)
    return 2


def _drain_on_signals(runtime: Runtime) -> None:
    # A signal handler only sets the drain flag (and says so); the executor decides what
    # to do with it: the first stops launching, a second ends the grace period now.
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if not runtime.draining.is_set():
            console.print(
                f"draining: {runtime.in_flight()} nodes in flight, up to {runtime.grace:g} s; "
                "Ctrl-C again to stop now",
                highlight=False,
            )
        elif not runtime.hurry.is_set():
            console.print(
                "stopping now: nodes in flight are cancelled, unrecorded (they run again "
                "on resume)",
                highlight=False,
            )
        runtime.drain()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)


def _kill_after(runtime: Runtime, n: int) -> None:
    """Die abruptly (SIGKILL, no cleanup) once n nodes are recorded."""
    count = 0

    def on_record(run_id: str, seq: int, record: Record) -> None:
        nonlocal count
        if record.HasField("node_completed"):
            count += 1
            if count >= n:
                console.print(f"[red]--stop-after {n}: killing the process (SIGKILL)[/]")
                os.kill(os.getpid(), signal.SIGKILL)

    runtime.events.on_record(on_record)


async def _execute(
    store: Store, args: argparse.Namespace, go: Callable[[Runtime], Awaitable[Outcome]]
) -> int:
    async with open_blobs(args.settings) as blobs:
        runtime = new_runtime(store, args.settings, blobs=blobs)
        return await _execute_with(runtime, args, go)


async def _execute_with(
    runtime: Runtime,
    args: argparse.Namespace,
    go: Callable[[Runtime], Awaitable[Outcome]],
    *,
    signals: bool = True,
) -> int:
    """Run `go(runtime)` with the live display and print its outcome; `signals=False`: the
    caller put the drain on SIGTERM and SIGINT already."""
    store = runtime.store
    if signals:
        _drain_on_signals(runtime)
    if getattr(args, "stop_after", None):
        _kill_after(runtime, args.stop_after)

    def announce(run_id: str, seq: int, record: Record) -> None:
        # The command's first record: its new run's RunStarted, or the RunResumed of the
        # run it continues. Then it stops listening: with nobody listening, a node's
        # record is not published at all.
        stop_announcing()
        if record.HasField("run_started") and not record.run_started.parent_run_id:
            console.print(f"run [bold]{run_id}[/] started")

    stop_announcing = runtime.events.on_record(announce)
    live: Any = contextlib.nullcontext()
    if not args.quiet:
        # Imported only for the live table: `--quiet` starts the run's first node without
        # them (a resume's recovery time) and follows no record for a table nobody sees.
        from rich.live import Live

        from tether.cli.display import Progress

        live = Live(Progress(runtime), console=console, refresh_per_second=8, transient=True)
    with live:
        outcome = await go(runtime)
    from tether.cli.display import budget_line, graph_tree

    console.print(graph_tree(outcome.graph))
    console.print(budget_line(outcome.graph))
    colour = {"succeeded": "green", "paused": "yellow", "waiting": "yellow"}.get(
        outcome.status.value, "red"
    )
    console.print(
        f"status: [{colour}]{outcome.status.value}[/]"
        + (f" ({outcome.reason})" if outcome.reason else "")
    )
    if outcome.result is not None:
        text = outcome.result.get("content") if isinstance(outcome.result, dict) else outcome.result
        console.print(f"[bold]result:[/] {text}")
    console.print(f"run id: {outcome.run_id}\nlog: {store.url}")
    if outcome.status is Status.PAUSED:
        console.print(f"resume with: tether resume {outcome.run_id}")
    if outcome.status is Status.WAITING:
        print_waits(outcome.graph)
    return 0 if outcome.status in (Status.SUCCEEDED, Status.PAUSED, Status.WAITING) else 1


def print_waits(graph: Graph) -> None:
    """The pending waits of a parked run, each with the command that answers it."""
    for wait in waits_view(graph):
        deadline = ""
        if wait["deadline_us"]:
            left = wait["deadline_us"] / 1e6 - time.time()
            deadline = f", times out in {left:.0f}s" if left > 0 else ", timed out"
        kind = "sleep" if wait["sleep"] else "wait"
        console.print(f"{kind} [bold]{wait['key']}[/]{deadline}", highlight=False)
        if wait["data"] is not None:
            console.print(f"  data: {json.dumps(wait['data'])}", highlight=False, markup=False)
        if not wait["sleep"]:
            console.print(
                f"  answer with: tether signal {graph.run_id} {wait['key']} --data JSON",
                highlight=False,
                markup=False,
            )


def demo_model_server(
    settings: Settings, enabled: bool
) -> contextlib.AbstractAsyncContextManager[Any]:
    """Serve the demo's scripted model for demo runs, only when asked (`--demo`).

    A production worker or server never starts it. `TETHER_DEMO_MODEL=openai:gpt-4.1`
    points the demo at a real provider instead.
    """
    if not enabled:
        return contextlib.nullcontext()
    try:
        from tether.demo.agent import demo_models
    except ImportError:  # the demo extra is not installed: this worker runs no demo
        return contextlib.nullcontext()
    return demo_models(settings.demo_model, speed=settings.demo_speed)


def _trace(settings: Settings) -> None:
    """Traces, when an exporter is configured (`OTEL_TRACES_EXPORTER`)."""
    tracing.enable_exporter(settings.traces_exporter, disabled=settings.traces_disabled)


def add_log_format(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--log-format",
        choices=logs.FORMATS,
        help="text, or one JSON object a line with run_id, node_id, owner, epoch "
        "(default: $TETHER_LOG_FORMAT or text)",
    )


def services_for(
    agent: str, args: argparse.Namespace
) -> contextlib.AbstractAsyncContextManager[Any]:
    """What the agent's runs need up while they execute here (its registry's `services`
    hook: the demo's scripted model, say); nothing if this code does not have the agent
    (the resume then says why it cannot continue it)."""
    try:
        registry = resolve_agent(agent)
    except UnknownAgent:
        return contextlib.nullcontext()
    speed = args.settings.demo_speed if hasattr(args, "settings") else None
    return registry.services(model=getattr(args, "model", None), speed=speed)
