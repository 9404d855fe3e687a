"""A real `tether serve` and `tether worker` at the default log level print no line per HTTP
request: neither the server's access log nor the demo's model calls through httpx."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.server.kit import OUTPUT, TOKEN, start_server, start_worker
from tether.client import TetherClient

# What a line per request looks like: uvicorn's access log and httpx's request log.
NOISE = ('HTTP/1.1" 200', "HTTP Request:")


async def test_serve_and_worker_print_no_line_per_request(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tether.db'}"
    server = start_server(tmp_path, db, "--workers", "external")
    worker = start_worker(tmp_path, db, "--poll", "0.2")
    try:
        async with TetherClient(server.url, TOKEN) as client:
            run_id = (await client.start("demo", {"prompt": "quiet?"}))["run_id"]
            async with asyncio.timeout(120):
                while (await client.get(run_id))["status"] != "succeeded":
                    await client.list()  # more requests for the access log to (not) show
                    await asyncio.sleep(0.2)  # polling the API: there is no event to wait on
            model_calls = (await client.get(run_id))["budget"]["used"]["model_calls"]
    finally:
        assert server.stop() == 0 and worker.stop() == 0
    assert model_calls >= 3  # the worker called the demo's model over HTTP
    said = {"serve": OUTPUT.get(server.proc.pid, []), "worker": OUTPUT.get(worker.proc.pid, [])}
    assert any("stopped" in line for line in said["serve"]), said  # its output was read
    assert any(run_id in line for line in said["worker"]), said
    noisy = {name: [s for s in lines if any(n in s for n in NOISE)] for name, lines in said.items()}
    assert noisy == {"serve": [], "worker": []}
