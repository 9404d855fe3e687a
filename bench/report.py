"""The table, the JSON and the PNG chart of one bench run."""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import Line


def fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        text = f"{value:,.0f}"
    elif abs(value) >= 100:
        text = f"{value:.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.3g}"
    return f"{text} {unit}".strip()


def rows(lines: Sequence[Line]) -> list[list[str]]:
    out = [["what", "value", "floor (named)", "ratio", "target", "result"]]
    for ln in lines:
        floor = f"{fmt(ln.floor, ln.unit)}: {ln.floor_name}" if ln.floor else ln.floor_name
        ratio = "-" if ln.ratio is None else f"{ln.ratio:.2f}x"
        out.append([ln.what, fmt(ln.value, ln.unit), floor, ratio, ln.target, ln.verdict])
    return out


def print_table(lines: Sequence[Line], *, title: str) -> None:
    table = rows(lines)
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    print(title)
    family = None
    for i, row in enumerate(table):
        if i and lines[i - 1].family != family:
            family = lines[i - 1].family
            print(f"-- {family}")
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


def machine() -> dict[str, Any]:
    try:
        import uvloop

        uv: str | None = uvloop.__version__
    except ImportError:
        uv = None
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "uvloop": uv,
    }


def write_json(lines: Sequence[Line], path: Path, *, mode: str, elapsed_s: float) -> Path:
    doc = {
        "mode": mode,
        "at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "elapsed_s": round(elapsed_s, 1),
        "machine": machine(),
        "lines": [ln.as_dict() for ln in lines],
    }
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path


def write_png(lines: Sequence[Line], path: Path, *, title: str) -> Path:
    """A bar per line with a floor: its ratio to the floor (log scale), coloured by result."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [ln for ln in lines if ln.ratio is not None]
    colours = {"pass": "#2e8b57", "MISS": "#c0392b", "info": "#7f8c8d"}
    fig, ax = plt.subplots(figsize=(11, 0.34 * len(shown) + 1.6))
    labels = [f"{ln.what}  ({fmt(ln.value, ln.unit)})" for ln in reversed(shown)]
    ratios = [ln.ratio or 0.0 for ln in reversed(shown)]
    ax.barh(labels, ratios, color=[colours[ln.verdict] for ln in reversed(shown)])
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("value / floor measured in the same run (green pass, red miss, grey info)")
    ax.set_title(title)
    ax.tick_params(axis="y", labelsize=8)
    for y, r in enumerate(ratios):
        ax.text(r, y, f" {r:.2f}x", va="center", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
