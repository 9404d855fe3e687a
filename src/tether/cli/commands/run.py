"""`tether demo`, `tether resume` and `tether cancel`: runs executed (or stopped) by this
process, with the live display."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

from tether.cli.common import (
    _drain_on_signals,
    _execute,
    _execute_with,
    console,
    fail,
    services_for,
)
from tether.control import actions as control
from tether.control.wiring import new_runtime, open_blobs
from tether.engine.executor import Outcome
from tether.engine.ownership import DEFAULT_LEASE_TTL
from tether.engine.runtime import Runtime
from tether.foundation import eager
from tether.foundation.errors import RunBusy
from tether.model.budgets import parse_budget, parse_change
from tether.model.run_view import waits_view
from tether.store import Status, Store

ORDER = 10


def add_parser(sub: Any) -> None:
    """`tether demo`, `tether resume` and `tether cancel`."""
    demo = sub.add_parser("demo", help="run the demo agent on a scripted model")
    demo.add_argument(
        "--question",
        default="How do agents survive a rolling deploy?",
        help="what the demo agent researches and answers",
    )
    demo.add_argument("--stop-after", type=int, help="SIGKILL the process after N recorded nodes")
    demo.add_argument("--budget", help="limits, e.g. nodes=8,tokens=5000")
    demo.add_argument(
        "--approve",
        action="store_true",
        help="the calc tool asks for approval: a y/n prompt, or (not at a terminal) the "
        "run parks and prints the `tether signal` command that answers it",
    )
    demo.set_defaults(fn=cmd_demo)

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
    resume.set_defaults(fn=cmd_resume)
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
    retry.set_defaults(fn=cmd_retry)
    cancel = sub.add_parser("cancel", help="stop a run for good (its owner records it)")
    cancel.add_argument("run_id")
    cancel.add_argument(
        "--wait", type=float, default=30.0, help="seconds to wait for the owner to stop it (30)"
    )
    cancel.set_defaults(fn=cmd_cancel)
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
        models = services_for(graph.agent, args)  # the demo's scripted model, say
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
        models = services_for(info.agent, args)
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
