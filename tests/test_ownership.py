"""A lost lease stops the run's handlers at once, in every kind of process.

The old owner of a run taken over with `tether resume --force` (or by any newer epoch)
learns it at its next renewal and cancels the task executing the run: its handlers write
nothing more. Workers did this; in-process runs (`Runtime.start`, `Runtime.resume`, what
`tether demo` and the examples use) only logged, and went on with their side effects.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tests.test_cli
from tests.agents import uid
from tests.ownership_agents import WRITING, agent
from tether import LeaseLost, Runtime, Status, Store

ROOT = Path(__file__).resolve().parents[1]


def lines_of(path: Path, pid: int) -> list[str]:
    if not path.exists():
        return []
    return [ln.split(" ", 1)[1] for ln in path.read_text().splitlines() if ln.startswith(f"{pid} ")]


async def test_an_in_process_run_whose_lease_is_taken_over_stops_its_handlers(
    durable_store: Store, tmp_path: Path
) -> None:
    out = tmp_path / "ticks"
    run_id = uid("own")
    rt = Runtime(durable_store, owner="old", lease_ttl=0.6)
    run = asyncio.create_task(rt.start(agent, {"out": str(out), "ticks": 600}, run_id=run_id))
    writing = WRITING.setdefault(run_id, asyncio.Event())
    await asyncio.wait_for(writing.wait(), 30)  # the handler is writing
    claim = await durable_store.leases.take(run_id, "new", 30, force=True)
    assert claim is not None and claim.epoch == 2
    await asyncio.wait({run}, timeout=30)  # (wait_for would cancel it on time-out)
    assert run.done(), "the old owner's run went on after losing its lease"
    with pytest.raises(LeaseLost, match=f"run {run_id}: lease taken over"):
        await run
    # The handler was cancelled, not left running: its last line says so, and nothing
    # follows it.
    assert lines_of(out, os.getpid())[-1] == "cancelled"
    assert len(lines_of(out, os.getpid())) < 600
    info = await durable_store.runs.get(run_id)
    assert info is not None and info.owner == "new" and info.status is Status.RUNNING


def env(home: Path, url: str) -> dict[str, str]:
    e = tests.test_cli.env(home)
    e["PYTHONPATH"] = f"{ROOT / 'src'}{os.pathsep}{ROOT}"
    e["TETHER_DATABASE_URL"] = url
    return e


START = """
import asyncio, sys
from tether import LeaseLost, Runtime, store_from_url
from tests.ownership_agents import WRITING, agent

async def main() -> int:
    async with store_from_url() as store:
        try:
            await Runtime(store, owner="old", lease_ttl=0.9).start(
                agent, {"out": sys.argv[1], "ticks": 600}, run_id=sys.argv[2]
            )
        except LeaseLost as exc:
            print(exc, flush=True)
            return 3
    return 0

sys.exit(asyncio.run(main()))
"""


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tether.db'}"
    url: str = request.getfixturevalue("fresh_pg_database")
    return url


def test_resume_force_stops_the_old_process_handlers_at_its_next_renewal(
    store_url: str, tmp_path: Path
) -> None:
    out, run_id = tmp_path / "ticks", uid("own")
    e = env(tmp_path, store_url)
    old = subprocess.Popen(
        [sys.executable, "-c", START, str(out), run_id],
        cwd=tmp_path,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    new: subprocess.Popen[str] | None = None
    try:
        give_up = time.monotonic() + 60
        while len(lines_of(out, old.pid)) < 2:  # the old owner's handler is writing
            assert old.poll() is None, old.communicate()[0]
            assert time.monotonic() < give_up, "the run never started"
            time.sleep(0.02)
        new = subprocess.Popen(
            [sys.executable, "-m", "tether", "resume", run_id, "--force"],
            cwd=tmp_path,
            env=e,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        said, _ = old.communicate(timeout=60)
        assert old.returncode == 3, said
        assert f"run {run_id}: lease taken over" in said
        mine = lines_of(out, old.pid)
        assert mine[-1] == "cancelled", mine  # stopped mid-handler; nothing after it
        assert len(mine) < 600
        (tmp_path / "stop").touch()  # let the new owner's handler finish
        took, _ = new.communicate(timeout=60)
        assert new.returncode == 0, took
        assert lines_of(out, new.pid), "the new owner executed the node"
        assert lines_of(out, old.pid) == mine  # the old owner wrote nothing more meanwhile
    finally:
        for proc in (old, new):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()


def test_leases_are_taken_and_given_back_in_one_module() -> None:
    # Who owns a run is decided in tether.engine.ownership; the writer's release is the
    # last record's, appended with it in one transaction. Everyone else asks the keeper.
    src = ROOT / "src" / "tether"
    calling = sorted(
        str(path.relative_to(src))
        for path in src.rglob("*.py")
        if "store" not in path.relative_to(src).parts[:1]
        and re.search(r"leases\.(take|release|renew|claim|reopen)\(", path.read_text())
    )
    assert calling == ["engine/ownership.py", "engine/writer.py"]
