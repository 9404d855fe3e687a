"""Crash points for fault-injection tests: `TETHER_FAULT=before_append:3` SIGKILLs the process.

The `tether` command hands `$TETHER_FAULT` to `plan` as it starts (`Settings.fault`).

The spec is `point:N[,point:N...]`: the process kills itself (no cleanup, as an OOM kill
or a power cut would) the Nth time it reaches `point`. Points: `before_append`,
`after_append` (the executor's append), `after_claim`, `before_release` (a run's finish:
its last record, status and release in one transaction).
Unset, `hit` costs one truth test (and `PLANNED` is False).
"""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter


def _parse(spec: str) -> dict[str, int]:
    points: dict[str, int] = {}
    for item in filter(None, spec.split(",")):
        point, _, n = item.partition(":")
        points[point.strip()] = int(n or 1)
    return points


_PLAN: dict[str, int] = {}
_seen: Counter[str] = Counter()
# Whether any point is planned: the executor's append, run for every node, tests this
# instead of making two calls that return at once.
PLANNED = False


def plan(spec: str) -> None:
    """Kill this process at the points `spec` names (`point:N[,point:N...]`; "": none)."""
    global _PLAN, PLANNED
    _PLAN = _parse(spec)
    _seen.clear()
    PLANNED = bool(_PLAN)


def hit(point: str) -> None:
    """Count a pass through `point`; SIGKILL this process if the plan says so."""
    if not _PLAN or point not in _PLAN:
        return
    _seen[point] += 1
    if _seen[point] == _PLAN[point]:
        # Announce on stderr first so a test can tell the planned death from a crash.
        sys.stderr.write(f"tether fault: SIGKILL at {point}:{_seen[point]}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
