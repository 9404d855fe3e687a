"""`tether limits set|list|remove`: model rate limits (`--model`, commands_rates) and
concurrency limits (`--agent`), one command group for both kinds of flow control."""

from __future__ import annotations

import argparse
import json
import time

from tether.cli import rates as commands_rates
from tether.cli.commands import console
from tether.foundation.errors import BadLimit
from tether.ops.concurrency import limit_views, remove_limit, set_limit
from tether.store import Store
from tether.store.limits import ConcurrencyLimit
from tether.store.rates import DEFAULT_PER

AGENT_ONLY = "--key, --each-key and --max-running go with --agent, not --model"
MODEL_ONLY = "--rpm, --tpm and --per go with --model, not --agent"


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
        return await commands_rates.cmd_rates_set(store, args)
    limit = concurrency_limit_of(args)
    await set_limit(store, limit)
    print(f"concurrency limit set: {limit.scope}: at most {limit.max_running} running")
    return 0


async def cmd_limits_remove(store: Store, args: argparse.Namespace) -> int:
    _refuse_mixed(args, setting=False)
    if args.model is not None:
        return await commands_rates.cmd_rates_remove(store, args)
    scope = await remove_limit(store, args.agent, args.key, each_key=args.each_key)
    print(f"concurrency limit removed: {scope}; its waiting runs are claimable at once")
    return 0


async def cmd_limits_list(store: Store, args: argparse.Namespace) -> int:
    now = time.time()
    models = [commands_rates.rate_row(s, now) for s in await store.rates.all() if s.limit]
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
        console.print(commands_rates.rates_table(models))
    if concurrency:
        from rich.table import Table

        table = Table("agent", "scope", "max running", "running now")
        for row in concurrency:
            scope = f"key {row['key']}" if row["key"] is not None else "each key"
            scope = scope if row["key"] is not None or row["each_key"] else "all its runs"
            running = f"{row['running']} (busiest key)" if row["each_key"] else str(row["running"])
            table.add_row(row["agent"], scope, str(row["max_running"]), running)
        console.print(table)
    return 0
