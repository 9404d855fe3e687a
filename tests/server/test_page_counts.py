"""The console says "1 run shown", not "1 runs shown" (issue 40), in real headless Chromium."""

from __future__ import annotations

from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.server.agents import chain_input
from tests.server.kit import CHAIN, TOKEN, start_server
from tests.server.test_console import sign_in, until
from tests.server.test_page import browser  # noqa: F401 (the fixture)
from tether.client import TetherClient


def count(driver: WebDriver) -> str:
    return str(driver.find_element(By.ID, "count").text)


async def test_one_run_listed_is_one_run_shown(
    tmp_path: Path,
    browser: WebDriver,  # noqa: F811
) -> None:
    server = start_server(tmp_path, f"sqlite:///{tmp_path / 'tether.db'}")
    try:
        async with TetherClient(server.url, TOKEN) as client:
            await client.start(CHAIN, chain_input(1, 1, 0))
        browser.get(server.url + "/")
        sign_in(browser, TOKEN)
        said = await until(lambda: count(browser).startswith("1 ") and count(browser))
    finally:
        server.stop()
    assert said.startswith("1 run shown"), said
