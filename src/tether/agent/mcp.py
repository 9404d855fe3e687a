"""MCP tools for tether's agents: the tools of an MCP server, each call a node like any tool.

`Agent(tools=[mcp_server("python", "server.py")])` (stdio) or `mcp_server("http://...")`
(streamable HTTP) offers the server's tools to the model. One connection per server and
event loop, opened on first use and kept: server start-up and tool listing happen once per
worker, not per run. A call that fails because the server died (or timed out) fails that
tool node, which its Retry policy retries on a fresh connection; after the last attempt the
model reads the error, like any tool's.

Needs the `mcp` package (`pip install 'tether[mcp]'`), imported only when a server is used.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tether.agent.messages import ToolSpec
from tether.foundation.core import Retry
from tether.foundation.errors import TetherError

if TYPE_CHECKING:
    from mcp import Client, StdioServerParameters


class MCPUnavailable(TetherError):
    """An MCP server could not be started or reached, or its connection broke mid-call."""


class MCPServer:
    """One MCP server whose tools an Agent offers its model. Build it with `mcp_server`."""

    def __init__(
        self,
        name: str,
        target: StdioServerParameters | str,
        *,
        retry: Retry,
        timeout: float | None,
    ) -> None:
        self.name = name
        self.target = target
        self.retry = retry
        self.timeout = timeout
        self._tools: list[ToolSpec] | None = None
        self._owner: asyncio.Task[None] | None = None
        self._client: asyncio.Future[Client] | None = None
        self._closing: asyncio.Event | None = None
        # How often a connection was opened (server start-ups), for tests and statistics.
        self.connections = 0

    def __repr__(self) -> str:
        return f"MCPServer({self.name!r}, {self.target!r})"

    # -- the connection: one task owns it, every call shares it -------------------------

    async def _connected(self) -> Client:
        loop = asyncio.get_running_loop()
        owner = self._owner
        if owner is None or owner.done() or owner.get_loop() is not loop:
            # The first use on this loop, or the last connection broke: open a new one.
            self._client = loop.create_future()
            self._closing = asyncio.Event()
            self._owner = loop.create_task(self._own(self._client, self._closing))
            self.connections += 1
        assert self._client is not None
        return await asyncio.shield(self._client)

    async def _own(self, ready: asyncio.Future[Client], closing: asyncio.Event) -> None:
        """Hold the connection open until closed: the client's task group lives in this task."""
        from mcp import Client

        try:
            async with Client(self.target) as client:
                ready.set_result(client)
                await closing.wait()
        except Exception as exc:
            if not ready.done():
                why = f"MCP server {self.name!r} ({self.target!r}) did not start: {exc}"
                ready.set_exception(MCPUnavailable(why))

    async def aclose(self) -> None:
        """Close the connection (and stop a stdio server's process)."""
        owner, self._owner = self._owner, None
        if owner is not None and not owner.done() and self._closing is not None:
            self._closing.set()
            await owner

    # -- tools --------------------------------------------------------------------------

    async def tools(self) -> list[ToolSpec]:
        """The server's tools, listed once and kept for the process."""
        if self._tools is None:
            client = await self._connected()
            listed = await client.list_tools()
            self._tools = [
                ToolSpec(t.name, t.description or t.name, dict(t.input_schema or {}))
                for t in listed.tools
            ]
        return self._tools

    async def call(self, name: str, arguments: Mapping[str, Any]) -> tuple[str, bool]:
        """Call a tool; return its content as text and whether the server marked it an error.

        MCPUnavailable if the connection broke or the call timed out: the connection is
        dropped, so the tool node's next attempt starts the server again.
        """
        client = await self._connected()
        try:
            result = await client.call_tool(
                name, dict(arguments), read_timeout_seconds=self.timeout
            )
        except Exception as exc:
            await self._drop()
            raise MCPUnavailable(
                f"MCP server {self.name!r}: call to {name!r} failed ({type(exc).__name__}: {exc})"
            ) from exc
        return _text_of(result), bool(result.is_error)

    async def _drop(self) -> None:
        owner, self._owner = self._owner, None
        if owner is not None and not owner.done() and self._closing is not None:
            self._closing.set()
            try:
                await asyncio.wait_for(owner, timeout=5)
            except (TimeoutError, Exception):
                owner.cancel()


def _text_of(result: Any) -> str:
    """A CallToolResult's content as the text a model reads: its text, else its JSON."""
    texts = [block.text for block in result.content if getattr(block, "text", None) is not None]
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return json.dumps([block.model_dump(mode="json") for block in result.content])


def mcp_server(
    command_or_url: str,
    *args: str,
    name: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    retry: Retry | None = None,
    timeout: float | None = 60.0,
) -> MCPServer:
    """An MCP server's tools for `Agent(tools=[...])`.

    `mcp_server("http://host:port/mcp")` connects over streamable HTTP;
    `mcp_server("python", "server.py", env=...)` starts a stdio server process. `retry`
    (default: 3 attempts) applies to each tool call, `timeout` (seconds) to each answer.
    """
    try:
        from mcp import StdioServerParameters
    except ImportError as exc:
        raise ImportError("MCP tools need the mcp package: pip install 'tether[mcp]'") from exc
    target: StdioServerParameters | str
    if command_or_url.startswith(("http://", "https://")):
        if args or env or cwd:
            raise ValueError("an MCP server over HTTP takes no command arguments, env or cwd")
        target = command_or_url
    else:
        target = StdioServerParameters(
            command=command_or_url, args=list(args), env=dict(env) if env else None, cwd=cwd
        )
    return MCPServer(
        name or command_or_url.rsplit("/", 1)[-1],
        target,
        retry=retry or Retry(attempts=3, backoff=0.2),
        timeout=timeout,
    )


def tool_names(servers: Sequence[MCPServer]) -> dict[str, MCPServer]:
    """Which server offers each listed tool (the first one, when two offer the same name)."""
    owners: dict[str, MCPServer] = {}
    for server in servers:
        for spec in server._tools or ():
            owners.setdefault(spec.name, server)
    return owners
