"""One word for each state over HTTP (issue 40): a run no worker has taken up is `queued`
in `GET /v1/runs/{id}` (`status` and `state`), as in its runs-list row and `tether show`."""

from __future__ import annotations

from pathlib import Path

from tests.server.agents import chain_input
from tests.server.kit import CHAIN, TOKEN, start_server
from tether.client import TetherClient


async def test_a_queued_run_is_queued_in_the_api_view_and_its_row(tmp_path: Path) -> None:
    server = start_server(tmp_path, f"sqlite:///{tmp_path / 'tether.db'}", "--workers", "external")
    try:
        async with TetherClient(server.url, TOKEN) as client:
            run_id = (await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"]
            view = await client.get(run_id)
            [row] = (await client.list(status="queued"))["runs"]
            then = await client.get(run_id, at_seq=0)
    finally:
        assert server.stop() == 0
    assert (view["status"], view["state"]) == ("queued", "queued")
    assert (row["run_id"], row["status"], row["state"]) == (run_id, "queued", "queued")
    assert (view["row"]["status"], view["row"]["state"]) == ("queued", "queued")
    # As of a seq the view is the log's alone: no row, the log's word at that record.
    assert (then["status"], then["state"], then["at_seq"]) == ("running", "running", 0)
