"""What each `tether` command does, given its parsed arguments (`tether.cli.app` parses them).

Every command gets its store from `tether.cli.app`, and its blobs and runtime from
`tether.control.wiring`, the one place settings are read and pieces are opened.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from rich.console import Console

from tether.control import actions as control
from tether.control.deploys import with_waiting
from tether.control.metering import metering
from tether.control.wiring import Settings, check_blobs, new_runtime, open_blobs
from tether.engine.executor import Outcome
from tether.engine.registry import resolve_agent
from tether.engine.runtime import Runtime
from tether.foundation import eager, logs, tracing
from tether.foundation.errors import RunBusy
from tether.model.budgets import parse_budget, parse_change
from tether.model.graph import Graph
from tether.model.records import Record
from tether.model.run_view import run_view, status_words, waits_view, with_row
from tether.store import (
    RunFilter,
    RunInfo,
    Status,
    Store,
    migrate_url,
    state_filter,
)
from tether.store.forks import Origin

console = Console()


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


async def cmd_demo(store: Store, args: argparse.Namespace) -> int:
    from tether.demo.agent import demo_models, require_approval, research

    budget = parse_budget(args.budget) if args.budget else None
    interactive = args.approve and sys.stdin.isatty()
    if args.approve:
        require_approval("calc")
        args.quiet = args.quiet or interactive  # the prompt and a live display do not mix

    async def go(rt: Runtime) -> Outcome:
        outcome = await research.run(rt, args.question, budget=budget)
        while interactive and outcome.status is Status.WAITING:
            for wait in waits_view(outcome.graph):
                decision = await _ask(rt, wait)
                if decision is None:  # Ctrl-C or EOF: nobody decided, the run stays parked
                    _say_how_to_answer(outcome.run_id, waits_view(outcome.graph))
                    return outcome
                await rt.signal(outcome.run_id, wait["key"], decision)
            outcome = await rt.resume(outcome.run_id)
        return outcome

    async with demo_models(args.model, speed=args.settings.demo_speed) as model:
        # A model it cannot call is one line before any run (the runtime refuses it too).
        research.check_model()
        console.print(f"[bold]tether demo[/]: a research agent on {model} (log: {store.url})")
        return await _execute(store, args, go)


# The only answers that decide; anything else (an empty line too) asks again.
_YES = ("y", "yes")
_NO = ("n", "no")


async def _ask(rt: Runtime, wait: dict[str, Any]) -> dict[str, Any] | None:
    """Ask at the terminal whether a tool call may run: the event to record, or None when
    nobody decided (end of input, or Ctrl-C, which drains `rt`): then nothing is recorded."""
    data = wait["data"] or {}
    call = f"{data.get('tool')}({json.dumps(data.get('arguments'))})"
    while True:
        line = await _read_line(f"approve {call}? [y/n] ", rt.draining)
        if line is None:
            return None
        answer = line.strip().lower()
        if answer in _YES:
            return {"approve": True}
        if answer in _NO:
            return {"approve": False, "reason": "rejected at the terminal"}
        if answer:
            console.print("please answer y or n (Ctrl-C or Ctrl-D: decide later)", highlight=False)


async def _read_line(prompt: str, stop: asyncio.Event) -> str | None:
    """A line typed at the terminal (stdin), read by the event loop, not by a thread that
    nothing can stop: None at the end of input or once `stop` is set (Ctrl-C drains)."""
    loop = asyncio.get_running_loop()
    fd = sys.stdin.fileno()
    line: asyncio.Future[str | None] = loop.create_future()
    buffered = bytearray()

    def readable() -> None:
        try:
            data = os.read(fd, 4096)
        except OSError:  # (the terminal went away: as the end of input)
            data = b""
        if not data:  # Ctrl-D on an empty line, or the terminal closed
            if not line.done():
                line.set_result(None)
            return
        buffered.extend(data)
        if b"\n" in buffered and not line.done():
            line.set_result(buffered.split(b"\n", 1)[0].decode(errors="replace"))

    sys.stdout.write(prompt)
    sys.stdout.flush()
    loop.add_reader(fd, readable)
    stopped: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([line, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        loop.remove_reader(fd)
        stopped.cancel()
    sys.stdout.write("\n")  # the prompt's line ends here whatever ended it
    sys.stdout.flush()
    return line.result() if line.done() else None


def _say_how_to_answer(run_id: str, waits: list[dict[str, Any]]) -> None:
    console.print("no decision recorded: the run waits for an answer", highlight=False)
    for wait in waits:
        console.print(
            f"answer later with: tether signal {run_id} {wait['key']} "
            """--data '{"approve": true}' (or false)""",
            highlight=False,
            markup=False,
        )


async def cmd_resume(store: Store, args: argparse.Namespace) -> int:
    # The log is read once, here, while the run is taken (UnknownRun if it has none): it
    # names the agent, holds the limits a `+N` budget adds to, and says whether the budget
    # is spent; the resume takes the run up as read (reading only what was appended since,
    # if anything was). The runs row is read only to name the owner a takeover fences.
    change = parse_change(args.budget) if args.budget else None  # a typo: refused first
    info = await store.runs.get(args.run_id) if args.force else None
    if info is not None and info.owner and not info.status.finished:
        console.print(
            f"taking run {args.run_id} over from {info.owner} at epoch {info.epoch + 1}: "
            "its owner's next append is refused (fenced) and it stops"
        )
    announced = False

    def waiting(busy: RunBusy) -> None:
        nonlocal announced
        if not announced:
            console.print(f"waiting: {busy}")
            announced = True

    async with open_blobs(args.settings) as blobs:
        runtime = new_runtime(store, args.settings, blobs=blobs)
        # The log's read is sent first; a signal drains from then on (the run may be taken
        # before it is built), and its handlers go in while the read is answered.
        loading = eager.start(
            asyncio.get_running_loop(), runtime.take_loading(args.run_id, force=args.force)
        )
        _drain_on_signals(runtime)
        claim, graph = await loading
        models: contextlib.AbstractAsyncContextManager[Any] = contextlib.nullcontext()
        if graph.agent.split(".")[0] == "demo":  # the demo's scripted model must be up again
            from tether.demo.agent import demo_models

            models = demo_models(args.model, speed=args.settings.demo_speed)
        try:
            async with models:
                return await _execute_with(
                    runtime,
                    args,
                    lambda rt: control.resume(
                        rt,
                        args.run_id,
                        change=change,
                        wait=args.wait,
                        force=args.force,
                        on_wait=waiting,
                        graph=graph,
                        claim=claim,
                    ),
                    signals=False,
                )
        except RunBusy as busy:
            return fail(
                f"{busy}; `tether resume --wait` waits for its lease to end, "
                "`--force` takes the run over now (the owner is fenced off)"
            )


async def cmd_retry(store: Store, args: argparse.Namespace) -> int:
    """Reopen a failed run (`tether.control.actions.retry`): here, or queued for a worker."""
    async with open_blobs(args.settings) as blobs:
        runtime = new_runtime(store, args.settings, blobs=blobs)
        if args.queue:
            status = await control.retry(runtime, args.run_id, ttl=args.lease_ttl)
            console.print(
                f"run {args.run_id}: retry recorded; {status.value} for a worker "
                "(its failed nodes run again, as new attempts)",
                highlight=False,
            )
            return 0
        info = await control.owner_of(runtime, args.run_id)
        models: contextlib.AbstractAsyncContextManager[Any] = contextlib.nullcontext()
        if info.agent.split(".")[0] == "demo":  # the demo's scripted model must be up again
            from tether.demo.agent import demo_models

            models = demo_models(args.model, speed=args.settings.demo_speed)
        async with models:
            return await _execute_with(
                runtime, args, lambda rt: control.retry_here(rt, args.run_id)
            )


async def cmd_cancel(store: Store, args: argparse.Namespace) -> int:
    runtime = new_runtime(store, args.settings)
    status = await control.cancel(runtime, args.run_id, ttl=args.lease_ttl)
    if not status.finished:  # its owner records the cancellation at its next renewal
        status = await control.wait_finished(runtime, args.run_id, within=args.wait)
    console.print(f"run {args.run_id}: {status.value}")
    return 0 if status is Status.CANCELLED else 1


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


async def cmd_submit(store: Store, args: argparse.Namespace) -> int:
    try:
        value = json.loads(args.input) if args.input is not None else None
    except json.JSONDecodeError as exc:
        raise ValueError(f"bad --input: not JSON ({exc})") from None
    budget = parse_budget(args.budget) if args.budget else None
    async with open_blobs(args.settings) as blobs:  # a large input is offloaded
        runtime = new_runtime(store, args.settings, blobs=blobs)
        run_id = await runtime.submit(
            args.agent,
            value,
            run_id=args.run_id,
            budget=budget,
            key=args.key,
            priority=args.priority,
        )
    print(run_id)
    return 0


async def cmd_runs(store: Store, args: argparse.Namespace) -> int:
    from tether.cli.display import runs_table

    status, where = None, RunFilter(agent=args.agent)
    if args.status:
        status, where = state_filter(args.status, where)
    rows = await store.runs.list(status=status, where=where, limit=args.limit)
    now = await store.runs.clock()  # leases are timed by the store's clock
    # A runnable run whose version no live worker serves says so (a deploy in progress).
    rows = await with_waiting(store, rows)
    origins = await store.forks.origins([r.run_id for r in rows])
    if args.json:
        print(json.dumps([_run_row(r, now, origins.get(r.run_id)) for r in rows], indent=2))
        return 0
    console.print(runs_table(rows, now, origins), soft_wrap=False)
    return 0


def _run_row(r: RunInfo, now: float, origin: Origin | None = None) -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "agent": r.agent,
        "status": r.status.value,
        "state": r.state(now),
        "lease_left": r.lease_left(now),
        "reason": r.reason,
        "parent_run_id": r.parent_run_id,
        "forked_from": origin.to_json() if origin else None,
        "created_at": r.created_at,
        "updated_at": r.updated_at,
        "owner": r.owner,
        "epoch": r.epoch,
        "lease_until": r.lease_until,
        "agent_version": r.agent_version,
        "key": r.key,
        "priority": r.priority,
    }


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


async def cmd_runs_prune(store: Store, args: argparse.Namespace) -> int:
    from tether.ops import parse_duration, prune
    from tether.store.retention import FINISHED

    older_than = parse_duration(args.finished_before)
    report = await prune(
        store,
        older_than=older_than,
        statuses=[Status(s) for s in args.status] if args.status else FINISHED,
        agent=args.agent,
        dry_run=args.dry_run,
    )
    if args.list:
        for run_id in report.run_ids:
            print(run_id)
    verb = "would remove" if report.dry_run else "removed"
    console.print(
        f"{verb} {report.runs} runs finished before {args.finished_before} ago "
        f"(+{report.child_runs} sub-agent runs): {report.rows} log rows, {report.bytes} bytes"
        + (f"; kept {report.skipped} with a live sub-agent run" if report.skipped else "")
        + ("" if report.dry_run else "; `tether blobs gc` now frees their blobs")
    )
    return 0


async def cmd_runs_delete(store: Store, args: argparse.Namespace) -> int:
    from tether.ops import delete_run

    async with open_blobs(args.settings) as blobs:
        report = await delete_run(store, args.run_id, blobs=blobs, shred=args.shred)
    console.print(
        (f"shredded {report.shredded} run keys, then " if args.shred else "")
        + f"deleted run {report.run_id} ({report.runs} runs with its sub-agent runs): "
        f"{report.rows} log rows, {report.log_bytes} bytes; {report.blobs} blobs, "
        f"{report.blob_bytes} bytes"
        + (f"; kept {report.blobs_kept} blobs other runs point to" if report.blobs_kept else "")
    )
    return 0


async def cmd_show(store: Store, args: argparse.Namespace) -> int:
    graph = await new_runtime(store, args.settings).load(args.run_id, at_seq=args.at)
    # As of a seq, the run is its log's prefix: its row (owner, lease) is today's, not shown.
    info = await store.runs.get(args.run_id) if args.at is None else None
    now = await store.runs.clock()
    if info is not None:
        [info] = await with_waiting(store, [info])
    if args.json:
        view = with_row(run_view(graph, outputs=args.outputs), info, now)
        view["at_seq"] = args.at
        if info is not None:
            view["lease_left"] = info.lease_left(now)
        print(json.dumps(view, indent=2))
        return 0
    from tether.cli.display import budget_line, graph_tree, lease_state

    if args.at is not None:
        console.print(f"run {args.run_id} as of seq {args.at} (tether history lists the seqs)")
    state = status_words(graph.status, info, now)[1]  # as `tether runs` says it
    console.print(graph_tree(graph, f"run {graph.run_id} [{graph.agent}] {state}"))
    if graph.agent_version:
        console.print(f"agent {graph.agent} version {graph.agent_version}")
    for n, retry in enumerate(graph.retries, 1):
        nodes = ", ".join(nid[:8] for nid in retry.node_ids) or "none"
        console.print(
            f"retry {n} at seq {retry.seq}: it had failed ({retry.error}); ran again: {nodes}",
            highlight=False,
            markup=False,
        )
    console.print(budget_line(graph))
    if graph.reason:
        console.print(f"reason: {graph.reason}")
    elif info is not None and info.reason and not info.status.finished:
        console.print(f"{info.state(now)}: {info.reason}")  # e.g. why no worker took it
    if info is not None and info.owner and not info.status.finished:
        left = info.lease_left(now)
        lease = "" if left is None else f", lease {lease_state(left)}"
        console.print(f"{info.state(now)}: owner {info.owner}, epoch {info.epoch}{lease}")
    if graph.open_waits:
        print_waits(graph)
    return 0


async def cmd_blobs_gc(store: Store, args: argparse.Namespace) -> int:
    from tether.ops.blob_gc import collect_garbage

    async with open_blobs(args.settings) as blobs:
        report = await collect_garbage(store, blobs, grace=args.grace, dry_run=args.dry_run)
    verb = "would free" if report.dry_run else "freed"
    console.print(
        f"{blobs.root_url}: scanned {report.runs} runs, {report.referenced} referenced blobs; "
        f"{verb} {report.deleted} blobs ({report.freed_bytes} bytes); "
        f"kept {report.kept} ({report.kept_bytes} bytes)"
        + (f"; removed {report.temps_removed} stale temp files" if report.temps_removed else "")
    )
    return 0


async def cmd_blobs_verify(store: Store, args: argparse.Namespace) -> int:
    from tether.ops.blob_verify import verify_run

    async with open_blobs(args.settings) as blobs:
        report = await verify_run(store, blobs, args.run_id)
    for bad in report.bad:
        console.print(
            f"[red]bad[/] {bad.ref.url} ({bad.where}, record seq {bad.seq}): {bad.problem}",
            soft_wrap=True,
        )
    console.print(
        f"run {report.run_id}: checked {report.checked} blobs ({report.checked_bytes} bytes), "
        + ("all intact" if report.ok else f"{len(report.bad)} bad")
    )
    return 0 if report.ok else 1


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


def cmd_keys_generate(args: argparse.Namespace) -> int:
    from tether.foundation.crypto.keyring import KeyRing

    ring = args.keys
    if ring is None:
        ring = KeyRing.new(args.id or "k1")
    else:
        ring = ring.with_new_key(args.id or f"k{len(ring.keys) + 1}")
    print(ring.dump())
    return 0


async def cmd_keys_rotate(store: Store, args: argparse.Namespace) -> int:
    from tether.blobs.sealed import SealedBlobStore
    from tether.foundation.errors import KeyRingError

    if args.keys is None:
        raise KeyRingError("tether keys rotate: no key ring configured (TETHER_KEYS)")
    resealed = kept = 0
    async with open_blobs(args.settings) as blobs:
        assert isinstance(blobs, SealedBlobStore)
        if args.blobs_too:
            async for info in blobs.list():
                if await blobs.reseal(info.sha256):
                    resealed += 1
                else:
                    kept += 1
    console.print(
        f"current key {args.keys.current!r}: "
        + (
            f"resealed {resealed} blobs, {kept} were current already"
            if args.blobs_too
            else "new data is sealed under it; old keys still open old data "
            "(--reseal-blobs re-seals blobs)"
        )
    )
    return 0


async def cmd_migrate(args: argparse.Namespace) -> int:
    try:
        applied = await migrate_url(args.settings.db, partitions=args.partitions)
    except ValueError as exc:  # --partitions out of range, or not a PostgreSQL store
        return fail(str(exc))
    where = args.settings.db.split("@")[-1]
    console.print(f"{where}: " + (f"applied {', '.join(applied)}" if applied else "up to date"))
    return 0
