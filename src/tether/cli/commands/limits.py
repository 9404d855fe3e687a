"""`tether limits set|list|remove`: model rate limits (`--model`, issue 16) and concurrency
limits (`--agent`), one command group for both kinds of flow control."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from tether.cli.common import console
from tether.foundation.errors import BadLimit
from tether.ops.concurrency import limit_views, remove_limit, set_limit
from tether.store import Store
from tether.store.limits import ConcurrencyLimit
from tether.store.rates import DEFAULT_PER, RateLimit, RateState

AGENT_ONLY = "--key, --each-key and --max-running go with --agent, not --model"
MODEL_ONLY = "--rpm, --tpm and --per go with --model, not --agent"

ORDER = 110


def add_parser(sub: Any) -> None:
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
    set_.set_defaults(fn=cmd_limits_set)
    remove = limits_sub.add_parser("remove", help="lift a model's or an agent's (key's) limit")
    what = remove.add_mutually_exclusive_group(required=True)
    what.add_argument("--model", help="lift this model's rate limit")
    what.add_argument(
        "--agent", help="lift this agent's concurrency limit (with --key K or --each-key)"
    )
    add_concurrency_options(remove, max_running=False)
    remove.set_defaults(fn=cmd_limits_remove)
    list_ = limits_sub.add_parser("list", help="the model rate limits and concurrency limits")
    list_.add_argument(
        "--json", action="store_true", help="one JSON object: models and concurrency"
    )
    list_.set_defaults(fn=cmd_limits_list, read_only=True)


def _refuse_mixed(args: argparse.Namespace, *, setting: bool) -> None:
    """One clear line when the options of the other kind of limit were given."""
    concurrency = args.key is not None or args.each_key
    if setting:
        concurrency = concurrency or args.max_running is not None
    if args.model is not None and concurrency:
        raise BadLimit(AGENT_ONLY)
    rates = setting and (args.rpm is not None or args.tpm is not None)
    if args.agent is not None and (rates or (setting and args.per != DEFAULT_PER)):
        raise BadLimit(MODEL_ONLY)


def concurrency_limit_of(args: argparse.Namespace) -> ConcurrencyLimit:
    """The limit `--agent A [--key K | --each-key] --max-running N` asks for (BadLimit)."""
    if args.max_running is None:
        raise BadLimit(f"concurrency limit of agent {args.agent}: give --max-running N")
    return ConcurrencyLimit(args.agent, args.max_running, args.key, args.each_key)


async def cmd_limits_set(store: Store, args: argparse.Namespace) -> int:
    _refuse_mixed(args, setting=True)
    if args.model is not None:
        return await cmd_rates_set(store, args)
    limit = concurrency_limit_of(args)
    await set_limit(store, limit)
    print(f"concurrency limit set: {limit.scope}: at most {limit.max_running} running")
    return 0


async def cmd_limits_remove(store: Store, args: argparse.Namespace) -> int:
    _refuse_mixed(args, setting=False)
    if args.model is not None:
        return await cmd_rates_remove(store, args)
    scope = await remove_limit(store, args.agent, args.key, each_key=args.each_key)
    print(f"concurrency limit removed: {scope}; its waiting runs are claimable at once")
    return 0


async def cmd_limits_list(store: Store, args: argparse.Namespace) -> int:
    now = time.time()
    models = [rate_row(s, now) for s in await store.rates.all() if s.limit]
    concurrency = await limit_views(store)
    if args.json:
        print(json.dumps({"models": models, "concurrency": concurrency}, indent=2))
        return 0
    if not models and not concurrency:
        print(
            "no limits; `tether limits set --model M --rpm R` or "
            "`tether limits set --agent A [--key K | --each-key] --max-running N` adds one"
        )
        return 0
    if models:
        console.print(rates_table(models))
    if concurrency:
        from tether.cli.display import cell
        from tether.cli.display import table as new_table

        table = new_table(
            "agent", "scope", "max running", "running now", flexible=("agent", "scope")
        )
        for row in concurrency:
            scope = f"key {row['key']}" if row["key"] is not None else "each key"
            scope = scope if row["key"] is not None or row["each_key"] else "all its runs"
            running = f"{row['running']} (busiest key)" if row["each_key"] else str(row["running"])
            table.add_row(cell(row["agent"]), cell(scope), str(row["max_running"]), running)
        console.print(table)
    return 0


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


def describe(limit: RateLimit) -> str:
    """`openai:gpt-4.1: 60 requests, 90000 tokens per 60 s`."""
    parts = [f"{limit.requests:g} requests" if limit.requests is not None else ""]
    parts.append(f"{limit.tokens:g} tokens" if limit.tokens is not None else "")
    return f"{limit.key}: {', '.join(p for p in parts if p)} per {limit.per:g} s"


def rate_limit_of(args: argparse.Namespace) -> RateLimit:
    """The limit `--model M --rpm R --tpm T [--per S]` asks for (BadRateLimit if it is bad)."""
    return RateLimit(args.model, requests=args.rpm, tokens=args.tpm, per=args.per)


async def cmd_rates_set(store: Store, args: argparse.Namespace) -> int:
    limit = rate_limit_of(args)  # checked before anything is stored
    await store.rates.set(limit)
    print(f"rate limit set: {describe(limit)}")
    return 0


async def cmd_rates_remove(store: Store, args: argparse.Namespace) -> int:
    if not await store.rates.remove(args.model):
        print(f"error: no rate limit for model {args.model!r}; `tether limits list` shows them")
        return 1
    print(f"rate limit removed: {args.model}; its calls start at once")
    return 0


def rate_row(state: RateState, now: float) -> dict[str, Any]:
    lim = state.limit
    return {
        "model": lim.key if lim else None,
        "rpm": lim.requests if lim else None,
        "tpm": lim.tokens if lim else None,
        "per_s": lim.per if lim else None,
        "blocked_for_s": round(max(0.0, state.blocked_until - now), 3),
    }


def rates_table(rows: list[dict[str, Any]]) -> Any:
    """The model rate limits (`rate_row`s) as a table."""
    from tether.cli.display import cell
    from tether.cli.display import table as new_table

    table = new_table("model", "requests", "tokens", "per", "429 block left", flexible=("model",))
    for row in rows:
        table.add_row(
            cell(row["model"]),
            "-" if row["rpm"] is None else f"{row['rpm']:g}",
            "-" if row["tpm"] is None else f"{row['tpm']:g}",
            f"{row['per_s']:g} s",
            f"{row['blocked_for_s']:g} s" if row["blocked_for_s"] else "",
        )
    return table
