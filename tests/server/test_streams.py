"""Streams that survive cuts: a gateway that drops every connection, a server that restarts."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from tests.server.agents import chain_input, chain_nodes
from tests.server.kit import CHAIN, TOKEN, CuttingProxy, start_server
from tether.client import RunEvent, TetherClient


def assert_exactly_once_in_order(records: list[RunEvent]) -> None:
    seqs = [r.seq for r in records]
    assert seqs == list(range(len(seqs))), seqs
    node_ids = [r.data["node_id"] for r in records if r.data["body"] == "node_completed"]
    assert len(node_ids) == len(set(node_ids))


async def test_every_record_once_in_order_through_a_proxy_that_cuts_every_few_seconds(
    tmp_path: Path,
) -> None:
    n, width = 25, 3  # about 20 s of simulated model latency, 97 nodes
    server = start_server(tmp_path, f"sqlite:///{tmp_path / 'tether.db'}", "--max-stream", "60")
    try:
        async with (
            CuttingProxy(server.url, cut_after=2.5) as proxy,
            TetherClient(proxy.url, TOKEN) as client,
        ):
            run_id = (await client.start(CHAIN, chain_input(n, width, 0.4)))["run_id"]
            records: list[RunEvent] = []
            tokens = 0
            async with asyncio.timeout(120):
                async for event in client.events(run_id, tokens=True):
                    if event.kind == "record":
                        records.append(event)
                    else:
                        tokens += 1
            assert_exactly_once_in_order(records)
            assert records[-1].data["status"] == "succeeded"
            completed = [r for r in records if r.data["body"] == "node_completed"]
            assert len(completed) == chain_nodes(n, width)
            assert proxy.cuts >= 5, proxy.cuts  # the stream really was cut, repeatedly
            assert tokens > 0
            run = await client.get(run_id)
            assert run["status"] == "succeeded" and run["records"] == len(records)
    finally:
        assert server.stop() == 0


async def test_sigterm_drains_the_run_and_a_restarted_server_finishes_it(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tether.db'}"
    server = start_server(tmp_path, db)
    port = server.url.rsplit(":", 1)[1]
    records: list[RunEvent] = []
    async with TetherClient(server.url, TOKEN) as client:
        run_id = (await client.start(CHAIN, chain_input(12, 2, 0.3)))["run_id"]
        async with asyncio.timeout(120):
            async for event in client.events(run_id):
                records.append(event)
                if len(records) == 6:
                    server.proc.send_signal(signal.SIGTERM)  # drain: nodes in flight finish
                if event.data["body"] == "run_paused":
                    assert event.data["reason"] == "drain"
                    server.proc.wait(timeout=60)
                    assert server.stop() == 0
                    # Same port: the client reconnects by itself and the page would too.
                    server = start_server(tmp_path, db, port=int(port))
        assert_exactly_once_in_order(records)
        bodies = [r.data["body"] for r in records]
        # Resumed twice: by the worker's first claim, then by the restarted server's.
        assert bodies.count("run_paused") == 1 and bodies.count("run_resumed") == 2
        assert records[-1].data["status"] == "succeeded"
        assert len([b for b in bodies if b == "node_completed"]) == chain_nodes(12, 2)
    assert server.stop() == 0
