"""Deploying new code while runs are in flight: a worker never fails a run its code lacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agents import uid
from tests.test_cli import env
from tether import Context, Node, NodeResult, Registry, Runtime, Spawn, Store
from tether.agent import Agent, tool
from tether.control.deploys import CannotUpgrade, upgrade
from tether.foundation.errors import CannotContinue
from tether.model.run_view import run_view
from tether.store import RunFilter, Status

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
def test_invariant_10_a_worker_never_claims_a_run_of_a_version_it_does_not_serve(
    tmp_path: Path, durable_store_url: str
) -> None:
    """Pinning: a worker of release 3 (which renamed the entry kind and declares nothing
    compatible) never claims a release-1 run, so its epoch never moves; the run waits
    queued, saying for which version, and a release-1 worker then finishes it (SQLite and
    PostgreSQL, real worker processes)."""
    db = durable_store_url
    run_id = _tether(tmp_path, db, "submit", AGENT, "--input", '"q"').strip()

    new = _worker(tmp_path, db, "3")
    try:
        assert new.stderr is not None
        for line in new.stderr:  # the handshake: it looked at the run and left it
            if f"run {run_id}: on version 1" in line:
                assert "(version 3) does not serve" in line, line
                break
        workers = json.loads(_tether(tmp_path, db, "workers", "--json", release="3"))
        assert [w["versions"][AGENT]["version"] for w in workers] == ["3"], workers
        row = _row(tmp_path, db, run_id)
    finally:
        err = _stop(new)
    assert f"run {run_id}: claimed" not in err, err
    assert row["status"] == "queued" and row["owner"] is None, row
    assert row["epoch"] == 0 and row["agent_version"] == "1", row  # never claimed
    assert row["reason"] == "waiting for a worker of version 1", row
    shown = _tether(tmp_path, db, "show", run_id)
    assert "queued: waiting for a worker of version 1" in shown, shown
    assert json.loads(_tether(tmp_path, db, "workers", "--json")) == []  # it left

    old = _worker(tmp_path, db, "1")
    assert old.stderr is not None
    for line in old.stderr:
        if f"run {run_id}: released succeeded" in line:
            break
    _stop(old)
    view = json.loads(_tether(tmp_path, db, "show", run_id, "--json"))
    assert view["status"] == "succeeded", view
    assert [n["kind"] for n in view["nodes"]] == ["plan", "search", "draft", "review", "publish"]


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


async def test_invariant_10_a_spawned_unknown_kind_gives_the_run_back(store: Store) -> None:
    """A node spawned mid-run whose kind this code lacks is not the run's failure: what was
    recorded stays, the run is given back queued with why, and code that has the kind
    finishes it, recording each node once."""
    name = uid("deploy.spawn")
    first = Registry(name, version="1")

    @first.node("plan")
    async def plan(ctx: Context, node: Node) -> NodeResult:
        return NodeResult("planned", spawn=[Spawn("polish", "p")])

    runtime = Runtime(store)
    with pytest.raises(CannotContinue, match="no handler for node kind 'polish'"):
        await runtime.start(first, "q")
    [info] = await store.runs.list(where=RunFilter(agent=name))
    assert info.status is Status.QUEUED and info.owner is None
    assert "waiting for a worker that can continue it" in (info.reason or "")
    graph = await runtime.load(info.run_id)
    assert graph.pending_kinds() == ["polish"] and not graph.nodes["root"].failed

    fixed = Registry(name, version="1")  # the same release, with the missing handler
    fixed.add("plan", plan)

    @fixed.node("polish")
    async def polish(ctx: Context, node: Node) -> NodeResult:
        return NodeResult("polished", is_result=True)

    outcome = await runtime.resume(info.run_id)
    assert outcome.status is Status.SUCCEEDED and outcome.result == "polished"
    view = run_view(outcome.graph)
    assert [n["kind"] for n in view["nodes"]] == ["plan", "polish"]


async def test_invariant_10_a_sub_agent_run_this_code_cannot_continue_gives_the_parent_back(
    store: Store,
) -> None:
    """The parent's node that continues a sub-agent run this code lacks a kind for records
    nothing and the parent is given back, never failed."""
    child_name, parent_name = uid("deploy.child"), uid("deploy.parent")
    child = Registry(child_name, version="1")

    @child.node("start")
    async def start(ctx: Context, node: Node) -> NodeResult:
        return NodeResult("started", spawn=[Spawn("later", None)])

    parent = Registry(parent_name, version="1")

    @parent.node("delegate")
    async def delegate(ctx: Context, node: Node) -> object:
        return await ctx.run_child(child_name, "x")

    runtime = Runtime(store)
    with pytest.raises(CannotContinue, match="no handler for node kind 'later'"):
        await runtime.start(parent, "q")
    [info] = await store.runs.list(where=RunFilter(agent=parent_name))
    assert info.status is Status.QUEUED, info
    graph = await runtime.load(info.run_id)
    assert graph.pending_kinds() == ["delegate"] and graph.finished is None


async def test_upgrade_moves_a_run_after_checking_the_code_here(store: Store) -> None:
    name = uid("deploy.up")
    v1 = Registry(name, version="1")
    v1.add("plan", _noop)
    runtime = Runtime(store)
    run_id = await runtime.submit(v1, "q")

    v2 = Registry(name, version="2")  # renamed the pending kind: cannot take the run
    v2.add("outline", _noop)
    with pytest.raises(CannotUpgrade, match="no handler for pending node kind 'plan'"):
        await upgrade(runtime, run_id, "2", ttl=5.0)
    with pytest.raises(CannotUpgrade, match="here is version 2, not 3"):
        await upgrade(runtime, run_id, "3", ttl=5.0)
    v2b = Registry(name, version="2")  # the same kinds, another version: it may move
    v2b.add("plan", _noop)
    assert await upgrade(runtime, run_id, "2", ttl=5.0) is Status.QUEUED
    info = await store.runs.get(run_id)
    assert info is not None and info.agent_version == "2" and info.status is Status.QUEUED
    assert info.owner is None and info.epoch == 1
    graph = await runtime.load(run_id)
    assert graph.agent_version == "2" and graph.started is not None
    assert graph.started.agent_version == "1"  # the history keeps where it started
    assert (await runtime.resume(run_id)).status is Status.SUCCEEDED  # version 2 continues it


def _run(home: Path, db: str, *args: str, release: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=home,
        env=_env(home, db, release),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_deploy_check_names_the_runs_the_code_here_cannot_continue(
    tmp_path: Path, durable_store_url: str
) -> None:
    """`tether deploy check` against a store (SQLite and PostgreSQL): exit 1 and the runs a
    release would strand; exit 0 when the code can continue every in-flight run."""
    db = durable_store_url
    run_id = _tether(tmp_path, db, "submit", AGENT, "--input", '"q"').strip()

    ok = _run(tmp_path, db, "deploy", "check", AGENT, release="1")
    assert ok.returncode == 0, ok.stderr
    assert "1 in-flight runs checked, 0 this code cannot continue" in ok.stdout, ok.stdout
    compatible = _run(tmp_path, db, "deploy", "check", AGENT, "--json", release="2")
    assert compatible.returncode == 0, compatible.stdout  # release 2: not reached `review`
    assert json.loads(compatible.stdout)["runs"] == []

    bad = _run(tmp_path, db, "deploy", "check", AGENT, "--json", release="3")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    view = json.loads(bad.stdout)
    assert view["version"] == "3" and view["checked"] == 1, view
    [run] = view["runs"]
    assert run["run_id"] == run_id and run["status"] == "queued" and run["version"] == "1"
    assert [p["what"] for p in run["problems"]] == ["kind"], run
    assert "no handler for pending node kind 'plan'" in run["problems"][0]["detail"]
    text = _run(tmp_path, db, "deploy", "check", AGENT, release="3")
    assert text.returncode == 1 and f"  {run_id} (queued, version 1): " in text.stdout

    refused = _run(tmp_path, db, "runs", "upgrade", run_id, "--to", "3", release="3")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "version 3 cannot continue it" in refused.stderr, refused.stderr  # errors: stderr
    moved = _run(tmp_path, db, "runs", "upgrade", run_id, "--to", "2", release="2")
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert f"run {run_id}: on version 2 now (queued)" in moved.stdout
    assert _row(tmp_path, db, run_id)["agent_version"] == "2"
