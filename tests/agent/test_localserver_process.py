"""Running the server: in-process lifecycle, and `python -m tether.testing`."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import openai
import pytest

from tether.testing import (
    LocalModelServer,
    ServerStartError,
    Turn,
    serve_local_models,
)

SRC = Path(__file__).resolve().parents[2] / "src"
READY_PREFIX = "tether-localserver listening on "


async def test_serving_binds_a_free_port_and_releases_it() -> None:
    server = LocalModelServer({"a": [Turn(text="a")]})
    async with serve_local_models(server) as running:
        assert running is server
        host, port = server.base_url.removeprefix("http://").rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        async with openai.AsyncOpenAI(
            base_url=server.openai_base_url, api_key="k", max_retries=0
        ) as client:
            reply = await client.chat.completions.create(
                model="script:a", messages=[{"role": "user", "content": "x"}]
            )
        assert reply.choices[0].message.content == "a"

    # The log outlives the server; the URL does not, and the port is free again.
    assert len(server.requests) == 1
    with pytest.raises(RuntimeError, match="not serving"):
        _ = server.base_url
    with socket.socket() as probe:
        # SO_REUSEADDR ignores TIME_WAIT leftovers but still fails on a live listener.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", int(port)))


async def test_two_servers_get_different_ports() -> None:
    async with serve_local_models() as one, serve_local_models() as two:
        assert one.base_url != two.base_url


async def test_a_taken_port_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ServerStartError, match=f"cannot listen on 127.0.0.1:{port}"):
            async with serve_local_models(port=port):
                pass


async def test_errors_in_the_block_propagate_unwrapped() -> None:
    # A TaskGroup inside the context manager would turn this into an ExceptionGroup.
    with pytest.raises(KeyError):
        async with serve_local_models():
            raise KeyError("from the test")


async def test_module_entry_point_serves_the_demo_until_sigterm() -> None:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tether.testing",
        "--port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        assert process.stdout is not None
        # The ready line is the handshake: the server accepts requests once it is printed.
        line = (await asyncio.wait_for(process.stdout.readline(), timeout=20)).decode()
        assert line.startswith(READY_PREFIX), line
        base_url = line.removeprefix(READY_PREFIX).strip()
        tools: Any = [
            {
                "type": "function",
                "function": {"name": "search", "parameters": {"type": "object"}},
            }
        ]
        async with openai.AsyncOpenAI(
            base_url=base_url + "/v1", api_key="k", max_retries=0
        ) as client:
            first = await client.chat.completions.create(
                model="script:demo",
                messages=[{"role": "user", "content": "Why is the sky blue?"}],
                tools=tools,
            )
            echoed = await client.chat.completions.create(
                model="script:echo", messages=[{"role": "user", "content": "ping"}]
            )
        calls = first.choices[0].message.tool_calls or []
        assert [c.function.name for c in calls] == ["search", "search"]  # type: ignore[union-attr]
        assert echoed.choices[0].message.content == "ping"
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=20)
    assert process.returncode == 0, stderr.decode()


async def test_one_server_object_cannot_serve_twice_at_once() -> None:
    server = LocalModelServer()
    async with serve_local_models(server):
        with pytest.raises(RuntimeError, match="already serving"):
            async with serve_local_models(server):
                pass
        assert server.base_url.startswith("http://127.0.0.1:")
