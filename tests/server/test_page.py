"""The live run page in real headless Chromium: nodes appear as the run grows, and the page
carries on without missing one when the server is killed and started again."""

from __future__ import annotations

import asyncio
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver

from tests.server.agents import chain_input, chain_nodes
from tests.server.kit import CHAIN, TOKEN, start_server
from tether.client import TetherClient

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.fail("the page test needs Debian's chromium and chromium-driver (scripts/test.sh)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument("--window-size=1400,1000")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def page_state(driver: WebDriver) -> dict[str, Any] | None:
    """The page's state, or None while the tab is between two documents (a sign-in or a
    link reloads it) and the new page's script has not run yet."""
    state: dict[str, Any] | None = driver.execute_script(
        "const s = window.tetherState; if (!s || !document.body) return null;"
        " return {seqs: s.seqs, status: s.status,"
        " finished: s.finished, nodes: [...s.nodes.values()].map(n => [n.id, n.status]),"
        " drawn: document.querySelectorAll('#graph g.node').length,"
        " completedDrawn: document.querySelectorAll('#graph g.node.completed').length};"
    )
    return state


async def wait_page(driver: WebDriver, check: Any, within: float = 60) -> dict[str, Any]:
    async with asyncio.timeout(within):
        while True:
            state = page_state(driver)
            if state is not None and check(state):
                return state
            await asyncio.sleep(0.1)  # polling a browser: there is no event to wait on


async def test_the_page_draws_the_run_as_it_grows_across_a_server_restart(
    tmp_path: Path, browser: WebDriver
) -> None:
    db = f"sqlite:///{tmp_path / 'tether.db'}"
    server = start_server(tmp_path, db)
    port = int(server.url.rsplit(":", 1)[1])
    n, width = 10, 2
    try:
        async with TetherClient(server.url, TOKEN) as client:
            run_id = (await client.start(CHAIN, chain_input(n, width, 0.4)))["run_id"]
        browser.get(f"{server.url}/runs/{run_id}?token={TOKEN}")
        assert browser.current_url == f"{server.url}/runs/{run_id}"  # token left the URL
        before = await wait_page(browser, lambda s: s["completedDrawn"] >= 4)
        assert before["status"] == "running" and not before["finished"]
        server.stop(signal.SIGKILL)  # no drain: the page sees its stream cut
        await wait_page(browser, lambda s: "reconnecting" in browser.page_source, within=30)
        server = start_server(tmp_path, db, port=port)  # takes the orphaned run up again
        after = await wait_page(browser, lambda s: s["finished"], within=90)
        browser.save_screenshot(str(tmp_path / "page.png"))
    finally:
        server.stop()
    assert after["status"] == "succeeded"
    assert after["seqs"] == list(range(len(after["seqs"])))  # every record once, in order
    assert len(after["nodes"]) == chain_nodes(n, width) == after["drawn"]
    assert {status for _, status in after["nodes"]} == {"completed"}
    assert len(after["seqs"]) > len(before["seqs"])
