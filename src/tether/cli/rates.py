"""`tether limits ... --model`: shared model rate limits (issue 16), stored for every worker
(`commands_limits` dispatches the `tether limits` group)."""

from __future__ import annotations

import argparse
from typing import Any

from tether.store import Store
from tether.store.rates import RateLimit, RateState


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
    from rich.table import Table

    table = Table("model", "requests", "tokens", "per", "429 block left")
    for row in rows:
        table.add_row(
            row["model"],
            "-" if row["rpm"] is None else f"{row['rpm']:g}",
            "-" if row["tpm"] is None else f"{row['tpm']:g}",
            f"{row['per_s']:g} s",
            f"{row['blocked_for_s']:g} s" if row["blocked_for_s"] else "",
        )
    return table
