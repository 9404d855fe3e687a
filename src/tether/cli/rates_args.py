"""The arguments of `tether limits`: `--model` (shared model rate limits) and `--agent`
(concurrency limits)."""

from __future__ import annotations

import argparse
from typing import Any

from tether.cli import limits as commands_limits
from tether.store.rates import DEFAULT_PER


def add_rate_options(set_: argparse.ArgumentParser) -> None:
    """`--model M --rpm R --tpm T [--per S]` on `tether limits set`."""
    rates = set_.add_argument_group("model rate limits (shared by every worker)")
    rates.add_argument("--rpm", type=float, metavar="R", help="requests per minute (per --per)")
    rates.add_argument("--tpm", type=float, metavar="T", help="tokens per minute (per --per)")
    rates.add_argument(
        "--per",
        type=float,
        default=DEFAULT_PER,
        metavar="S",
        help=f"the window the rates count in, seconds ({DEFAULT_PER:g}: per minute)",
    )


def add_concurrency_options(parser: argparse.ArgumentParser, *, max_running: bool) -> None:
    """`--key K | --each-key` (and `--max-running N`) beside `--agent A`."""
    group = parser.add_argument_group("concurrency limits (enforced by every claim)")
    scope = group.add_mutually_exclusive_group()
    scope.add_argument("--key", metavar="K", help="only the runs with this concurrency key")
    scope.add_argument("--each-key", action="store_true", help="each concurrency key apart")
    if max_running:
        group.add_argument("--max-running", type=int, metavar="N", help="runs at once, 1 or more")


def add_limits(sub: Any) -> None:
    """`tether limits set|list|remove`: `--model M` (rates) or `--agent A` (concurrency)."""
    limits = sub.add_parser(
        "limits", help="flow control: shared model rate limits and concurrency limits"
    )
    limits_sub = limits.add_subparsers(dest="limits_command", required=True)
    set_ = limits_sub.add_parser(
        "set", help="limit a model's calls, or an agent's (or key's) runs at once, for every worker"
    )
    what = set_.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", help="the model (e.g. openai:gpt-4.1) or key")
    what.add_argument("--agent", help="the agent, as runs name it (e.g. pkg.mod:agent)")
    add_rate_options(set_)
    add_concurrency_options(set_, max_running=True)
    set_.set_defaults(fn=commands_limits.cmd_limits_set)
    remove = limits_sub.add_parser("remove", help="lift a model's or an agent's (key's) limit")
    what = remove.add_mutually_exclusive_group(required=True)
    what.add_argument("--model")
    what.add_argument("--agent")
    add_concurrency_options(remove, max_running=False)
    remove.set_defaults(fn=commands_limits.cmd_limits_remove)
    list_ = limits_sub.add_parser("list", help="the model rate limits and concurrency limits")
    list_.add_argument("--json", action="store_true")
    list_.set_defaults(fn=commands_limits.cmd_limits_list, read_only=True)
