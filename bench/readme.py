"""`python -m bench --readme`: put a run's table and chart into docs/benchmarks.md.

The table sits between two markers in docs/benchmarks.md and is replaced whole; the chart
is copied to docs/images/bench.png, which the page shows. Run it on a quiet machine: every
figure is a ratio to a floor measured in the same run, but a loaded machine still widens
the spread between runs.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import Line
from bench.report import fmt, machine

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmarks.md"
CHART = ROOT / "docs" / "images" / "bench.png"
START = "<!-- bench-table: start (python -m bench --readme writes this part) -->"
END = "<!-- bench-table: end -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(lines: Sequence[Line], *, title: str, about: dict[str, Any]) -> str:
    """The Markdown of one run: a heading line, the table, the chart."""
    out = [
        f"{title}; Python {about['python']}, {about['cpus']} CPUs, {about['platform']}.",
        "",
        "| family | what | value | floor (measured in the same run) | ratio | target | result |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for ln in lines:
        floor = f"{fmt(ln.floor, ln.unit)}: {ln.floor_name}" if ln.floor else ln.floor_name
        ratio = "-" if ln.ratio is None else f"{ln.ratio:.2f}x"
        verdict = {"MISS": "**miss**", "pass": "pass", "info": "-"}[ln.verdict]
        cells = [ln.family, ln.what, fmt(ln.value, ln.unit), floor, ratio, ln.target, verdict]
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    out += ["", "![value / floor for every line with a floor](images/bench.png)"]
    return "\n".join(out)


def update(lines: Sequence[Line], chart: Path, *, title: str, page: Path = PAGE) -> Path:
    """Replace the table between the markers of `page` and copy `chart` next to it."""
    text = page.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{page}: the markers {START!r} and {END!r} are missing")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    body = table(lines, title=title, about=machine())
    page.write_text(f"{head}{START}\n{body}\n{END}{tail}")
    target = page.parent / "images" / CHART.name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(chart, target)
    return page
