"""The rolling deploy, played with real worker processes on PostgreSQL (bench/deploy.py
plays it and prints the handover latency; this test checks what it did to every run)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench.deploy import play
from tether.store import Status

CHAIN_1 = ["plan", "search", "draft", "review", "publish"]


@pytest.mark.timeout(300)
def test_a_rolling_deploy_moves_compatible_runs_and_strands_none(
    tmp_path: Path, fresh_pg_database: str
) -> None:
    played = asyncio.run(play(fresh_pg_database, tmp_path, runs=20))

    # None failed, each node was recorded once, every run has its five nodes.
    assert played.finished == dict.fromkeys(played.run_ids, Status.SUCCEEDED), played.finished
    assert played.failed_nodes == [] and played.recorded_twice == []
    assert all(len(kinds) == 5 for kinds in played.kinds.values()), played.kinds

    # The compatible runs moved to release 2 once the old workers were stopped.
    assert played.moved, "no run moved to release 2 after the SIGTERM"
    assert len(played.latencies) == len(played.moved)
    assert all(s > 0 for s in played.latencies), played.latencies
    for run_id in played.moved | played.early:
        assert played.kinds[run_id][:2] == ["plan", "search"], played.kinds[run_id]
        assert "review" not in played.kinds[run_id][3:] or played.kinds[run_id][3] == "review"

    # The runs that had reached `review` waited for a release-1 worker, and the deploy
    # check between the phases named exactly them (exit 1 when there are any).
    assert played.named == played.stranded
    assert played.check_exit == (1 if played.stranded else 0)
    assert not played.stranded & played.moved
    for run_id in played.stranded:
        assert played.kinds[run_id] == CHAIN_1, played.kinds[run_id]
    if played.stranded:
        assert played.upgrade_refusal.startswith("2: error: run "), played.upgrade_refusal
        assert "no handler for pending node kind 'review'" in played.upgrade_refusal
