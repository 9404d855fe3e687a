"""A real MCP server for the tests: `python mcp_tools_server.py [stdio | http PORT]`.

`inventory(item)` answers from a table. `fragile(item)` kills the whole server process in the
middle of its first call when TETHER_TEST_MCP_DIE_ONCE names a file that does not exist yet
(it creates the file first, so the call after a restart answers).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

STOCK = {"bolts": 120, "nuts": 75, "washers": 0}
server = MCPServer("inventory")


@server.tool()
def inventory(item: str) -> str:
    """How many of an item are in stock."""
    return f"{item}: {STOCK.get(item, 0)} in stock"


@server.tool()
def fragile(item: str) -> str:
    """Like inventory, on a server that dies mid-call once."""
    marker = os.environ.get("TETHER_TEST_MCP_DIE_ONCE")
    if marker and not Path(marker).exists():
        Path(marker).write_text("died")
        os._exit(1)
    return inventory(item)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
