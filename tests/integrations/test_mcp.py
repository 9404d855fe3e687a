"""MCP tools for tether's agents: a real MCP server process, stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from tests.s3server import free_port
from tether import Runtime, Status, Store
from tether.agent import Agent, MCPServer, mcp_server
from tether.agent import ToolSpec as AgentToolSpec
from tether.model.records import attempt_of, decode_log
from tether.testing import (
    LocalModelServer,
    Message,
    ToolCall,
    ToolSpec,
    Turn,
    serve_local_models,
)

SERVER = Path(__file__).parent / "mcp_tools_server.py"


def clerk(tool: str) -> Any:
    """Ask the MCP tool `tool` about bolts, then repeat what it said."""

    def script(messages: Sequence[Message], tools: Sequence[ToolSpec], /) -> Turn:
        said = [m.text for m in messages if m.role == "tool"]
        if not said:
            assert tool in {t.name for t in tools}, [t.name for t in tools]
            return Turn(tool_calls=[ToolCall(tool, {"item": "bolts"})])
        return Turn(text="Stock: " + "; ".join(said))

    return script


@pytest.fixture
async def models() -> AsyncIterator[LocalModelServer]:
    async with serve_local_models({"clerk": clerk("inventory"), "fragile": clerk("fragile")}) as s:
        yield s


def clerk_agent(models: LocalModelServer, server: MCPServer, *, model: str = "clerk") -> Agent:
    return Agent(
        f"test.mcp.{model}",
        model=f"openai:script:{model}",
        base_url=models.openai_base_url,
        api_key="local",
        tools=[server],
    )


async def tool_records(store: Store, run_id: str) -> list[Any]:
    rows = await store.log.read_all(run_id)
    return [
        r.node_completed
        for r in decode_log(run_id, rows)
        if r.node_completed.kind.startswith("mcp:")
    ]


async def test_an_agent_calls_an_mcp_servers_tool_as_a_node(
    durable_store: Store, models: LocalModelServer
) -> None:
    server = mcp_server(sys.executable, str(SERVER), name="inventory")
    async with clerk_agent(models, server) as agent:
        first = await agent.run(Runtime(durable_store), "How many bolts?")
        second = await agent.run(Runtime(durable_store), "And now?")
    assert first.status is Status.SUCCEEDED, first.reason
    assert first.result["content"] == "Stock: bolts: 120 in stock"
    assert second.result == first.result
    (call,) = await tool_records(durable_store, first.run_id)
    assert call.kind == "mcp:inventory" and attempt_of(call) == 1
    # Started and listed once for both runs: the connection is the worker's, not the run's.
    assert server.connections == 1


async def test_an_mcp_server_that_dies_mid_call_fails_the_call_through_its_retry_policy(
    durable_store: Store, models: LocalModelServer, tmp_path: Path
) -> None:
    died = tmp_path / "died"
    server = mcp_server(
        sys.executable,
        str(SERVER),
        name="inventory",
        env={"TETHER_TEST_MCP_DIE_ONCE": str(died)},
    )
    async with clerk_agent(models, server, model="fragile") as agent:
        outcome = await agent.run(Runtime(durable_store), "How many bolts?")
    assert died.exists()  # the first call took the server down
    assert outcome.status is Status.SUCCEEDED, outcome.reason
    assert outcome.result["content"] == "Stock: bolts: 120 in stock"
    (call,) = await tool_records(durable_store, outcome.run_id)
    assert call.attempt == 2 and not call.fallback
    assert server.connections == 2


async def test_a_call_that_fails_every_attempt_goes_back_to_the_model_as_an_error(
    store: Store, models: LocalModelServer, tmp_path: Path
) -> None:
    # A server that cannot start: every attempt fails, then the model reads the error.
    server = mcp_server(sys.executable, str(tmp_path / "missing.py"), name="inventory")
    server._tools = [AgentToolSpec("inventory", "stock", {"type": "object"})]  # listed earlier
    async with clerk_agent(models, server) as agent:
        outcome = await agent.run(Runtime(store), "How many bolts?")
    assert outcome.status is Status.SUCCEEDED
    (call,) = await tool_records(store, outcome.run_id)
    assert call.fallback and call.attempt == 3
    assert "MCPUnavailable" in outcome.result["content"]


@pytest.fixture
def http_server() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_an_mcp_server_over_streamable_http(
    store: Store, models: LocalModelServer, http_server: str
) -> None:
    port = int(http_server.split(":")[2].split("/")[0])
    for _ in range(200):  # ready when it accepts a connection (a 20 s bound)
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.1)
            continue
        writer.close()
        await writer.wait_closed()
        break
    async with clerk_agent(models, mcp_server(http_server, name="inventory")) as agent:
        outcome = await agent.run(Runtime(store), "How many bolts?")
    assert outcome.status is Status.SUCCEEDED, outcome.reason
    assert outcome.result["content"] == "Stock: bolts: 120 in stock"


def test_bad_mcp_server_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="over HTTP takes no command"):
        mcp_server("http://127.0.0.1:1/mcp", "extra")
