"""Deploying new code while runs are in flight: a worker never fails a run its code lacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agents import uid
from tests.test_cli import env
from tether import Context, Node, Registry, Runtime, Store
from tether.agent import Agent, tool
from tether.inspect import run_view

AGENT = "tests.deploy_agents:agent"
ROOT = Path(__file__).resolve().parent.parent


def _env(home: Path, db: str, release: str) -> dict[str, str]:
    e = env(home)
    e.update(DEPLOY_RELEASE=release, TETHER_DATABASE_URL=db)
    e["PYTHONPATH"] = f"{e['PYTHONPATH']}:{ROOT}"
    return e


def _tether(home: Path, db: str, *args: str, release: str = "1") -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=home,
        env=_env(home, db, release),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"tether {args}: {done.stdout}\n{done.stderr}"
    return done.stdout


def _worker(home: Path, db: str, release: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tether", "worker", "--poll", "0.05"],
        cwd=home,
        env=_env(home, db, release),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return err


def _row(home: Path, db: str, run_id: str) -> dict[str, object]:
    rows = json.loads(_tether(home, db, "runs", "--json"))
    row: dict[str, object] = next(r for r in rows if r["run_id"] == run_id)
    return row


@pytest.mark.timeout(180)
def test_invariant_10_unknown_kinds_never_fail_a_run(
    tmp_path: Path, durable_store_url: str
) -> None:
    """A worker whose release lacks a pending node's kind gives the run back queued with
    why, records nothing and does not claim it again; a worker of the old release then
    finishes it (SQLite and PostgreSQL, real worker processes)."""
    db = durable_store_url
    run_id = _tether(tmp_path, db, "submit", AGENT, "--input", '"q"').strip()

    new = _worker(tmp_path, db, "2")
    assert new.stderr is not None
    for line in new.stderr:  # the handshake: it claimed the run and gave it back
        if "gave it back" in line:
            assert f"run {run_id}: " in line, line
            assert "no handler for pending node kind 'plan'" in line, line
            break
    row = _row(tmp_path, db, run_id)
    again = _row(tmp_path, db, run_id)  # a while later: it was not claimed again
    err = _stop(new)
    assert err.count(f"run {run_id}: claimed at epoch") == 0, err  # after the handshake
    for seen in (row, again):
        assert seen["status"] == "queued" and seen["owner"] is None, seen
        assert "no handler for pending node kind 'plan'" in str(seen["reason"]), seen
        assert "waiting for a worker that can continue it" in str(seen["reason"]), seen
    assert seen["epoch"] == 1, seen  # claimed once, by the release-2 worker
    shown = _tether(tmp_path, db, "show", run_id)
    assert "waiting for a worker that can continue it" in shown, shown

    old = _worker(tmp_path, db, "1")
    assert old.stderr is not None
    for line in old.stderr:
        if f"run {run_id}: released succeeded" in line:
            break
    _stop(old)
    view = json.loads(_tether(tmp_path, db, "show", run_id, "--json"))
    assert view["status"] == "succeeded", view
    assert [n["kind"] for n in view["nodes"]] == ["plan"], view


def test_a_registry_version_is_declared_or_derived_from_its_kinds_and_input() -> None:
    def two(name: str, second: str, **kw: object) -> Registry:
        agent = Registry(uid(name), **kw)  # type: ignore[arg-type]
        agent.add("plan", _noop)
        agent.add(second, _noop)
        return agent

    assert two("v.declared", "act", version="2026-12-01").version == "2026-12-01"
    same_a, same_b = two("v.a", "act"), two("v.b", "act")
    assert same_a.version == same_b.version and same_a.version.startswith("h-")
    assert two("v.renamed", "act2").version != same_a.version  # a renamed kind
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    shaped = two("v.shaped", "act", input=schema)
    assert shaped.version != same_a.version  # a declared input shape
    reshaped = two("v.reshaped", "act", input={**schema, "required": ["q"]})
    assert reshaped.version != shaped.version
    with pytest.raises(ValueError, match="version must not be empty"):
        Registry(uid("v.empty"), version=" ")


def test_an_agent_version_covers_its_tools() -> None:
    @tool
    async def search(q: str) -> str:
        return q

    @tool
    async def fetch(url: str) -> str:
        return url

    one = Agent(uid("v.agent"), model="m", tools=[search])
    assert one.registry.version == Agent(uid("v.agent"), model="m", tools=[search]).registry.version
    assert one.registry.version != Agent(uid("v.agent"), model="m", tools=[fetch]).registry.version
    assert Agent(uid("v.agent"), model="m", version="7").registry.version == "7"


async def test_a_run_records_the_version_it_started_on(store: Store) -> None:
    agent = Registry(uid("v.run"), version="r1")
    agent.add("only", _noop)
    runtime = Runtime(store)
    run_id = await runtime.submit(agent)
    graph = await runtime.load(run_id)
    assert graph.started is not None and graph.started.agent_version == "r1"
    assert run_view(graph)["agent_version"] == "r1"


async def _noop(ctx: Context, node: Node) -> None:
    return None
