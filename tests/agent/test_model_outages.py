"""A model outage pauses a run; it does not fail it. `resume` continues it once the model is
back, from the records it kept. Against the local model server (real SDK, real sockets) on
SQLite and PostgreSQL: a server that refuses connections, answers 503 or 429 for a while,
or refuses the API key (a key rotated away); and configuration errors refused before any
run is recorded."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import tether as tether_pkg
from tests import outage_agents
from tests.outage_agents import SCRIPTS, outage_agent
from tether import Runtime, Status, Store
from tether.agent import Agent, ModelNotConfigured
from tether.testing import (
    ClientError,
    LocalModelServer,
    Message,
    RateLimited,
    ServerError,
    ToolCall,
    ToolSpec,
    Turn,
    serve_local_models,
)

MODEL = "openai:script:adder"
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ModelHost:
    """The local model server on a fixed port, that a test takes down (connections are then
    refused) and brings back; one request log across both."""

    def __init__(self) -> None:
        self.port = free_port()
        self.models = LocalModelServer(SCRIPTS)
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def up(self) -> None:
        ready = asyncio.Event()
        self._stop = asyncio.Event()

        async def serve() -> None:
            async with serve_local_models(self.models, port=self.port):
                ready.set()
                await self._stop.wait()

        self._task = asyncio.create_task(serve())
        waiting = asyncio.create_task(ready.wait())
        await asyncio.wait([self._task, waiting], return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if self._task.done():
            self._task.result()

    async def down(self) -> None:
        """Stop listening: from now on, connecting to the port is refused."""
        if self._task is not None:
            self._stop.set()
            await self._task
            self._task = None


@pytest.fixture
async def host() -> AsyncIterator[ModelHost]:
    h = ModelHost()
    outage_agent.base_url = h.url + "/v1"
    try:
        yield h
    finally:
        await h.down()
        outage_agents.BETWEEN.clear()
        await outage_agent.aclose()


def recorded_kinds(graph: Any) -> list[str]:
    return [graph.nodes[n].spec.kind for n in graph.order if graph.nodes[n].completed]


async def pause_mid_run(store: Store, host: ModelHost, outage: Any) -> tuple[str, Any, list[bytes]]:
    """Start the agent with the model up; between its two turns `outage()` happens; return
    the paused run's id, its outcome and its log."""
    await host.up()
    outage_agents.BETWEEN.append(outage)
    paused = await Runtime(store).start(outage_agent.registry, {"prompt": "add 2 and 3"})
    assert paused.status is Status.PAUSED, paused.reason
    # The first turn and the tool are recorded; the second turn is not, and nothing failed.
    assert recorded_kinds(paused.graph) == ["turn", "tool:add"]
    assert not any(s.failed for s in paused.graph.nodes.values())
    row = await store.runs.get(paused.run_id)
    assert row is not None and row.status is Status.PAUSED and row.reason == paused.reason
    return paused.run_id, paused, await store.log.read_all(paused.run_id)


async def resume_to_the_end(
    store: Store, host: ModelHost, run_id: str, before: list[bytes]
) -> None:
    done = await Runtime(store).resume(run_id)
    assert done.status is Status.SUCCEEDED, done.reason
    assert done.result["content"] == "2 + 3 = 5"
    # What was recorded before the outage is still there, unchanged, and not done again.
    after = await store.log.read_all(run_id)
    assert after[: len(before)] == before
    assert recorded_kinds(done.graph) == ["turn", "tool:add", "turn"]
    first_turn = [r for r in host.models.requests_for("script:adder") if r.turn_index == 0]
    assert len(first_turn) == 1


async def test_connection_refused_pauses_and_resume_finishes(
    durable_store: Store, host: ModelHost
) -> None:
    run_id, paused, before = await pause_mid_run(durable_store, host, host.down)
    assert paused.reason == (
        f"model {MODEL} unreachable (connection refused) after 2 attempt(s); "
        "resume the run once it answers again"
    )
    await host.up()
    await resume_to_the_end(durable_store, host, run_id, before)


async def test_503_for_a_while_pauses_and_resume_finishes(
    durable_store: Store, host: ModelHost
) -> None:
    async def overloaded() -> None:
        host.models.inject(ServerError(503), ServerError(503))

    run_id, paused, before = await pause_mid_run(durable_store, host, overloaded)
    assert paused.reason.startswith(
        f"model {MODEL} unavailable (HTTP 503 Service Unavailable) after 2 attempt(s)"
    )
    await resume_to_the_end(durable_store, host, run_id, before)
    statuses = [r.status for r in host.models.requests_for("script:adder")]
    assert statuses == [200, 503, 503, 200]


async def test_429_for_a_while_pauses_and_resume_finishes(
    durable_store: Store, host: ModelHost
) -> None:
    async def throttled() -> None:
        host.models.inject(RateLimited(retry_after=0.01), RateLimited(retry_after=0.01))

    run_id, paused, before = await pause_mid_run(durable_store, host, throttled)
    assert paused.reason.startswith(
        f"model {MODEL} rate limited (HTTP 429 Too Many Requests) after 2 attempt(s)"
    )
    await resume_to_the_end(durable_store, host, run_id, before)


async def test_a_key_refused_mid_run_pauses_naming_the_variable(
    durable_store: Store, host: ModelHost
) -> None:
    async def rotated() -> None:
        host.models.inject(ClientError(401))

    run_id, paused, before = await pause_mid_run(durable_store, host, rotated)
    assert paused.reason.startswith(f"model {MODEL}: the provider refused its API key (HTTP 401")
    assert "set OPENAI_API_KEY to a valid key, then resume the run" in paused.reason
    # Not retried: a refused key is not an outage.
    assert [r.status for r in host.models.requests_for("script:adder")] == [200, 401]
    await resume_to_the_end(durable_store, host, run_id, before)


async def test_a_tools_own_error_is_not_an_outage(durable_store: Store, host: ModelHost) -> None:
    async def broken() -> None:
        raise RuntimeError("the tool's own bug")

    await host.up()
    outage_agents.BETWEEN.append(broken)
    outcome = await Runtime(durable_store).start(outage_agent.registry, {"prompt": "add"})
    # The tool's error goes back to the model (its fallback), and the run goes on: a
    # handler's own exception is judged by its retry policy, as before.
    assert outcome.status is Status.SUCCEEDED
    assert "the tool's own bug" in outcome.result["content"]


def boss(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Turn:
    """Hand the sum to the helper sub-agent, then answer with what it said."""
    results = [m.text for m in messages if m.role == "tool"]
    if not results:
        return Turn(tool_calls=[ToolCall("helper", {"task": "add 2 and 3"})])
    return Turn(text="helper says: " + results[-1])


async def test_a_sub_agents_outage_pauses_its_parent_and_resume_finishes_both(
    durable_store: Store, host: ModelHost
) -> None:
    host.models.scripts.add("boss", boss)
    helper = Agent(
        "tests.outage.helper",
        model=MODEL,
        tools=[outage_agents.add],
        base_url=host.url + "/v1",
        tool_name="helper",
        model_attempts=2,
        model_backoff=0.01,
    )
    parent = Agent(
        "tests.outage.boss", model="openai:script:boss", base_url=host.url + "/v1", tools=[helper]
    )
    await host.up()
    outage_agents.BETWEEN.append(host.down)  # the helper's tool takes the model down
    try:
        paused = await Runtime(durable_store).start(parent.registry, {"prompt": "sum"})
        assert paused.status is Status.PAUSED, paused.reason
        assert paused.reason.startswith("sub-agent run ")
        assert f"model {MODEL} unreachable (connection refused)" in paused.reason
        await host.up()
        done = await Runtime(durable_store).resume(paused.run_id)
        assert done.status is Status.SUCCEEDED, done.reason
        assert done.result["content"] == "helper says: 2 + 3 = 5"
        child = [r for r in await durable_store.runs.list() if r.parent_run_id == paused.run_id]
        assert [c.status for c in child] == [Status.SUCCEEDED]
    finally:
        await helper.aclose()
        await parent.aclose()


# -- configuration errors, refused before anything is recorded ---------------------------


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("bogus", "model 'bogus': write it as provider:model"),
        ("bogus:gpt-4.1", "model 'bogus:gpt-4.1': unknown provider 'bogus'"),
        ("openai:gpt-4.1", "model openai:gpt-4.1: no API key: set OPENAI_API_KEY"),
        ("anthropic:claude-sonnet-4", "no API key: set ANTHROPIC_API_KEY"),
    ],
)
async def test_a_model_that_cannot_be_called_is_refused_before_a_run_is_recorded(
    durable_store: Store, no_keys: None, model: str, message: str
) -> None:
    agent = Agent(f"tests.outage.config.{model}", model=model)
    with pytest.raises(ModelNotConfigured, match=message.replace("(", r"\(")):
        await Runtime(durable_store).start(agent.registry, {"prompt": "hi"})
    assert await durable_store.runs.list() == []


async def test_a_sub_agents_model_is_checked_with_its_parent(
    durable_store: Store, no_keys: None
) -> None:
    sub = Agent("tests.outage.sub", model="anthropic:claude-sonnet-4", tool_name="helper")
    agent = Agent("tests.outage.parent", model=MODEL, base_url="http://127.0.0.1:9/v1", tools=[sub])
    with pytest.raises(ModelNotConfigured, match="set ANTHROPIC_API_KEY"):
        await Runtime(durable_store).start(agent.registry, {"prompt": "hi"})
    assert await durable_store.runs.list() == []


async def test_a_queued_run_is_accepted_and_pauses_where_the_key_is_missing(
    durable_store: Store, no_keys: None
) -> None:
    # A worker may hold the key the submitting process lacks: only the provider is checked
    # at submit; the process that executes it pauses the run, naming the variable.
    agent = Agent("tests.outage.queued", model="openai:gpt-4.1")
    with pytest.raises(ModelNotConfigured, match="unknown provider"):
        await Runtime(durable_store).submit(
            Agent("tests.outage.queued-bogus", model="bogus:x").registry, {"prompt": "hi"}
        )
    run_id = await Runtime(durable_store).submit(agent.registry, {"prompt": "hi"})
    outcome = await Runtime(durable_store).resume(run_id)
    assert outcome.status is Status.PAUSED
    assert outcome.reason == (
        "model openai:gpt-4.1: no API key: set OPENAI_API_KEY (or pass api_key= to the agent)"
    )


# -- the command line ------------------------------------------------------------------


def cli_env(home: Path, **extra: str) -> dict[str, str]:
    e = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TETHER_", "OPENAI_", "ANTHROPIC_"))
    }
    src = Path(tether_pkg.__file__).resolve().parent.parent
    e.update(TETHER_DATA_DIR=str(home / ".tether"), COLUMNS="250", TETHER_DEMO_SPEED="0")
    e["PYTHONPATH"] = os.pathsep.join([str(src), str(ROOT)])
    e.update(extra)
    return e


def tether(home: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tether", *args],
        cwd=home,
        env=cli_env(home, **extra),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("model", "variable"),
    [
        ("bogus", "write it as provider:model"),
        ("openai:gpt-4.1", "set OPENAI_API_KEY"),
        ("anthropic:claude-sonnet-4", "set ANTHROPIC_API_KEY"),
    ],
)
def test_the_demo_refuses_a_model_it_cannot_call_before_any_run(
    tmp_path: Path, model: str, variable: str
) -> None:
    done = tether(tmp_path, "demo", "--model", model, "--quiet")
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: model "), done.stderr
    assert variable in lines[0]
    listed = tether(tmp_path, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == []


async def run_cli(home: Path, *args: str, **extra: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tether",
        *args,
        cwd=home,
        env=cli_env(home, **extra),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_tether_resume_pauses_while_the_model_is_down_then_finishes(
    tmp_path: Path, durable_store: Store, durable_store_url: str, host: ModelHost
) -> None:
    url = {"TETHER_TEST_MODEL_URL": host.url}
    code, out, err = await run_cli(
        tmp_path, "submit", "tests.outage_agents:outage", "--input", '"add 2 and 3"',
        "--db", durable_store_url, **url,
    )  # fmt: skip
    assert code == 0, err
    run_id = out.strip().split()[-1]
    # The model is down: the run pauses, and says why and how to go on.
    code, out, err = await run_cli(tmp_path, "resume", run_id, "--db", durable_store_url, **url)
    assert code == 0, err
    assert (
        f"status: paused (model {MODEL} unreachable (connection refused) after 2 attempt(s)"
        in " ".join(out.split())
    ), out
    assert f"resume with: tether resume {run_id}" in out
    row = await durable_store.runs.get(run_id)
    assert row is not None and row.status is Status.PAUSED
    await host.up()
    code, out, err = await run_cli(
        tmp_path, "resume", run_id, "--db", durable_store_url, "--quiet", **url
    )
    assert code == 0, err + out
    assert "status: succeeded" in out and "2 + 3 = 5" in out, out


async def test_the_http_api_refuses_an_unknown_provider_with_422_recording_nothing(
    sqlite_store: Store,
) -> None:
    import httpx

    from tests.server.kit import TOKEN, running

    agent = "tests.outage_agents:bogus"
    async with (
        running(sqlite_store, agents=(agent,)) as (url, _),
        httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}) as http,
    ):
        response = await http.post("/v1/runs", json={"agent": agent, "input": "hi"})
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["type"] == "model_not_configured"
        assert "unknown provider 'bogus'" in error["message"]
    assert await sqlite_store.runs.list() == []


class APIConnectionError(Exception):
    """Named as the SDKs name theirs: what a connection that failed looks like."""


class RemoteProtocolError(Exception):
    """Named as httpx names a reply cut mid-stream."""


def wrapped(cause: BaseException) -> APIConnectionError:
    try:
        try:
            raise cause
        except BaseException as inner:
            raise APIConnectionError("Connection error.") from inner
    except APIConnectionError as outer:
        return outer


@pytest.mark.parametrize(
    ("cause", "said"),
    [
        (ConnectionRefusedError(111, "Connect call failed"), "connection refused"),
        (socket.gaierror(-2, "Name or service not known"), "host name not resolved"),
        (ConnectionResetError(104, "Connection reset by peer"), "connection reset"),
        (TimeoutError(), "timed out"),
        (RemoteProtocolError("peer closed connection"), "connection cut mid-reply"),
    ],
)
async def test_each_transient_cause_is_named_in_the_pause(cause: BaseException, said: str) -> None:
    from tether.agent import ModelUnavailable
    from tether.agent.retries import with_retries

    async def call() -> None:
        raise wrapped(cause)

    with pytest.raises(ModelUnavailable) as raised:
        await with_retries(call, attempts=2, backoff=0.001, model="openai:gpt-4.1")
    assert str(raised.value).startswith(f"model openai:gpt-4.1 unreachable ({said}")
