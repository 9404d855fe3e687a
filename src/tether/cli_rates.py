"""The arguments of `tether limits ... --model` (shared model rate limits)."""

from __future__ import annotations

import argparse
from typing import Any

from tether import commands_rates
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


def add_limits(sub: Any) -> None:
    """`tether limits set|list|remove --model M`."""
    limits = sub.add_parser("limits", help="flow control: shared model rate limits")
    limits_sub = limits.add_subparsers(dest="limits_command", required=True)
    set_ = limits_sub.add_parser("set", help="limit a model's calls across every worker")
    set_.add_argument("--model", required=True, help="the model (e.g. openai:gpt-4.1) or key")
    add_rate_options(set_)
    set_.set_defaults(fn=commands_rates.cmd_rates_set)
    remove = limits_sub.add_parser("remove", help="lift a model's rate limit")
    remove.add_argument("--model", required=True)
    remove.set_defaults(fn=commands_rates.cmd_rates_remove)
    list_ = limits_sub.add_parser("list", help="the model rate limits")
    list_.add_argument("--json", action="store_true")
    list_.set_defaults(fn=commands_rates.cmd_rates_list, read_only=True)
