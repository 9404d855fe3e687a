"""`python -m bench [--quick] [--only FAMILY,...] [--readme]`: run the benchmarks, print one
table.

Writes `bench/results/{quick,full}.json` and `.png` (or under `--out`); with `--readme`, also
the table and chart of docs/benchmarks.md (run it on a quiet machine).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench import (
    agent_turns,
    blob_memory,
    checkpoint,
    flow_claims,
    fork,
    growth,
    integrations,
    memory,
    model_server,
    operations,
    overlap,
    partitions,
    rehydrate,
    scheduling,
    steps,
    throughput,
    tlog,
    workers,
)
from bench.common import Line, Settings, drop_pg, prepare_pg
from bench.readme import update as update_readme
from bench.report import print_table, write_json, write_png

FAMILIES: dict[str, Callable[[Settings], list[Line]]] = {
    "checkpoint": checkpoint.run,
    "throughput": throughput.run,
    "rehydrate": rehydrate.run,
    "scheduling": scheduling.run,
    "overlap": overlap.run,
    "growth": growth.run,
    "memory": memory.run,
    "blob_memory": blob_memory.run,
    "model_server": model_server.run,
    "agent": agent_turns.run,
    "steps": steps.run,
    "workers": workers.run,
    "operations": operations.run,
    "partitions": partitions.run,
    "fork": fork.run,
    "flow_claims": flow_claims.run,
    "tlog": tlog.run,
    "integrations": integrations.run,
}
# Families that need the PostgreSQL bench database.
NEEDS_PG = {
    "checkpoint",
    "throughput",
    "rehydrate",
    "overlap",
    "growth",
    "workers",
    "steps",
    "operations",
    "partitions",
    "fork",
    "flow_claims",
    "tlog",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: under two minutes")
    parser.add_argument("--only", default="", help=f"comma-separated among {', '.join(FAMILIES)}")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument(
        "--readme",
        action="store_true",
        help="write this run's table and chart into docs/benchmarks.md (a full run of "
        "every family, on a quiet machine)",
    )
    args = parser.parse_args(argv)
    chosen = [f for f in args.only.split(",") if f] or list(FAMILIES)
    unknown = set(chosen) - set(FAMILIES)
    if unknown:
        parser.error(f"unknown families {sorted(unknown)}; choose among {list(FAMILIES)}")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tether-bench-") as tmp:
        settings = Settings(quick=args.quick, workdir=Path(tmp))
        use_pg = bool(NEEDS_PG & set(chosen))
        if use_pg:
            asyncio.run(prepare_pg(settings))
        lines: list[Line] = []
        try:
            for name in chosen:
                t0 = time.perf_counter()
                lines += FAMILIES[name](settings)
                print(f"  {name}: {time.perf_counter() - t0:.1f}s", file=sys.stderr, flush=True)
        finally:
            if use_pg:
                asyncio.run(drop_pg(settings))
    elapsed = time.perf_counter() - started
    mode = "quick" if args.quick else "full"
    print_table(lines, title=f"tether bench ({mode}, {elapsed:.0f}s)")
    args.out.mkdir(parents=True, exist_ok=True)
    json_path = write_json(lines, args.out / f"{mode}.json", mode=mode, elapsed_s=elapsed)
    png_path = write_png(lines, args.out / f"{mode}.png", title=f"tether bench ({mode})")
    print(f"\nwrote {json_path} and {png_path}")
    if args.readme:
        when = time.strftime("%Y-%m-%d", time.gmtime())
        page = update_readme(lines, png_path, title=f"`python -m bench` ({mode}), {when}")
        print(f"wrote the table and chart of {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
