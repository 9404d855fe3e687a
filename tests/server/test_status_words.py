"""One word for each state over HTTP (issue 40): a run no worker has taken up is `queued`
in `GET /v1/runs/{id}` (`status` and `state`), as in its runs-list row and `tether show`,
and its page in the console (headless Chromium) says so too."""

from __future__ import annotations

from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.server.agents import chain_input
from tests.server.kit import CHAIN, TOKEN, start_server
from tests.server.test_console import until
from tests.server.test_page import browser
from tether.client import TetherClient

__all__ = ["browser"]  # the fixture, used by name


async def test_a_queued_run_is_queued_in_the_api_view_its_row_and_its_page(
    tmp_path: Path, browser: WebDriver
) -> None:
    server = start_server(tmp_path, f"sqlite:///{tmp_path / 'tether.db'}", "--workers", "external")
    try:
        async with TetherClient(server.url, TOKEN) as client:
            run_id = (await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"]
            view = await client.get(run_id)
            [row] = (await client.list(status="queued"))["runs"]
            then = await client.get(run_id, at_seq=0)
        browser.get(f"{server.url}/runs/{run_id}?token={TOKEN}")
        badge = await until(
            lambda: (t := browser.find_element(By.ID, "status").text) != "connecting" and t
        )
        browser.execute_script("Tether.remember(arguments[0])", TOKEN)  # this tab's sign-in
        browser.get(server.url + "/")
        in_list = await until(
            lambda: (
                browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr .badge")
                and browser.find_element(By.CSS_SELECTOR, "#runs tbody tr .badge").text
            )
        )
    finally:
        assert server.stop() == 0
    assert (view["status"], view["state"]) == ("queued", "queued")
    assert (row["run_id"], row["status"], row["state"]) == (run_id, "queued", "queued")
    assert (view["row"]["status"], view["row"]["state"]) == ("queued", "queued")
    # As of a seq the view is the log's alone: no row, the log's word at that record.
    assert (then["status"], then["state"], then["at_seq"]) == ("running", "running", 0)
    assert (badge, in_list) == ("queued", "queued")
