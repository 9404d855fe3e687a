"""`tether limits ... --agent` and `tether submit --key --priority`, in real processes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from tests.flow_processes import env
from tether.store import store_from_url

AGENT = "tests.limit_agents:nap"


def tether(db: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args, "--db", db],
        env=env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_limits_set_list_remove_and_a_queued_run_says_why_it_waits(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/t.db"
    done = tether(db, "limits", "set", "--agent", AGENT, "--key", "A", "--max-running", "1")
    assert done.returncode == 0, done.stderr
    assert f"concurrency limit set: key A of agent {AGENT}: at most 1 running" in done.stdout
    assert tether(db, "limits", "set", "--agent", AGENT, "--each-key", "--max-running", "3")
    assert tether(db, "limits", "set", "--model", "openai:m", "--rpm", "60").returncode == 0
    listed = json.loads(tether(db, "limits", "list", "--json").stdout)
    assert [m["model"] for m in listed["models"]] == ["openai:m"]
    assert listed["concurrency"] == [
        {"agent": AGENT, "key": "A", "each_key": False, "max_running": 1, "running": 0},
        {"agent": AGENT, "key": None, "each_key": True, "max_running": 3, "running": 0},
    ]
    text = tether(db, "limits", "list").stdout
    assert "key A" in text and "each key" in text and "openai:m" in text
    ids = [
        tether(db, "submit", AGENT, "--key", "A", "--priority", str(p)).stdout.strip()
        for p in (0, 2)
    ]
    # No worker here: claim as one would; the other run then waits for the key's slot.
    runs = json.loads(tether(db, "runs", "--json").stdout)
    assert {(r["key"], r["priority"]) for r in runs} == {("A", 0), ("A", 2)}

    async def claim_one() -> None:
        async with store_from_url(db) as store:
            [claim] = await store.leases.claim("w", 10, 60.0)
            assert claim.run_id == ids[1]  # the higher priority first

    asyncio.run(claim_one())
    row = [r for r in json.loads(tether(db, "runs", "--json").stdout) if r["run_id"] == ids[0]]
    # No worker serves its version either (none runs here): both reasons show.
    assert row[0]["reason"].startswith("waiting: key A at its limit 1; waiting for a worker")
    assert "waiting: key A at its limit 1" in tether(db, "show", ids[0]).stdout
    removed = tether(db, "limits", "remove", "--agent", AGENT, "--key", "A")
    assert "its waiting runs are claimable at once" in removed.stdout
    row = [r for r in json.loads(tether(db, "runs", "--json").stdout) if r["run_id"] == ids[0]]
    assert row[0]["reason"].startswith("waiting for a worker of version")


def test_bad_limits_say_what_was_wrong_in_one_line_and_store_nothing(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/t.db"
    cases = [
        (["--agent", AGENT, "--max-running", "0"], "max running must be 1 or more, not 0"),
        (["--agent", AGENT, "--max-running", "-3"], "max running must be 1 or more, not -3"),
        (["--agent", AGENT], "give --max-running N"),
        (["--agent", "no.such:agent", "--max-running", "2"], "no.such"),
        (["--agent", AGENT, "--rpm", "5", "--max-running", "2"], "go with --model"),
        (["--model", "m", "--rpm", "5", "--key", "A"], "go with --agent"),
    ]
    for args, message in cases:
        done = tether(db, "limits", "set", *args)
        assert done.returncode != 0, args
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (args, done.stderr)
    both = tether(db, "limits", "set", "--agent", AGENT, "--key", "A", "--each-key",
                  "--max-running", "2")  # fmt: skip
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    gone = tether(db, "limits", "remove", "--agent", AGENT, "--key", "A")
    assert gone.returncode != 0 and "no concurrency limit of key A" in gone.stderr
    listed = json.loads(tether(db, "limits", "list", "--json").stdout)
    assert listed == {"models": [], "concurrency": []}
    bad_key = tether(db, "submit", AGENT, "--key", "")
    assert bad_key.returncode != 0 and "concurrency key ''" in bad_key.stderr
    assert json.loads(tether(db, "runs", "--json").stdout) == []
