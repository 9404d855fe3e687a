"""A small MCP server (stdio) for examples/mcp_agent.py: stock levels of a hardware store."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

STOCK = {"bolts": 120, "nuts": 75, "washers": 0}
server = MCPServer("inventory")


@server.tool()
def inventory(item: str) -> str:
    """How many of an item are in stock."""
    return f"{item}: {STOCK.get(item, 0)} in stock"


if __name__ == "__main__":
    server.run()
