"""The run page's Export button in headless Chromium (issue 13): it downloads the run as
`RUN_ID.tlog` through the API with the tab's token (asked for if the tab has none), and
`tether import` loads the file into another store, where the run reads as on the server."""

from __future__ import annotations

import json
from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.server.agents import chain_input
from tests.server.kit import CHAIN, TOKEN, ServerProcess
from tests.server.test_console import finish, server, sign_in, until, wait_page
from tests.server.test_page import browser
from tests.test_cli import tether
from tether.client import TetherClient

__all__ = ["browser", "server"]  # the fixtures, used by name


def note(driver: WebDriver) -> str:
    return str(driver.find_element(By.ID, "action-note").text)


async def test_export_downloads_a_file_that_tether_import_accepts(
    server: ServerProcess, browser: WebDriver, tmp_path: Path
) -> None:
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    browser.execute_cdp_cmd(
        "Page.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
    )
    async with TetherClient(server.url, TOKEN) as client:
        run_id = (await client.start(CHAIN, chain_input(3, 2, 0)))["run_id"]
        assert await finish(client, run_id) == "succeeded"
        source = await client.get(run_id)
        browser.get(f"{server.url}/runs/{run_id}?token={TOKEN}")
        await wait_page(browser, lambda s: s["finished"])

        # The tab has no API token yet: the button asks for it, then downloads.
        browser.find_element(By.ID, "export").click()
        sign_in(browser, TOKEN)
        await until(lambda: note(browser).startswith("exported"))
        assert note(browser).startswith(f"exported {run_id}.tlog (")
        saved = downloads / f"{run_id}.tlog"
        await until(lambda: saved.exists() and not list(downloads.glob("*.crdownload")))
        assert saved.read_bytes().startswith(b"\x89TLOG")  # the file, not an error page

        # Signed in now: a second click exports again without asking (Chromium may hold
        # a second download from the same page for the user's permission; not checked).
        browser.execute_script("document.getElementById('action-note').textContent = ''")
        browser.find_element(By.ID, "export").click()
        await until(lambda: note(browser).startswith("exported"))
        assert not browser.find_elements(By.ID, "signin-token")

    home = tmp_path / "elsewhere"
    home.mkdir()
    tether(home, "import", str(saved))
    shown = json.loads(tether(home, "show", run_id, "--json").stdout)
    assert (shown["status"], shown["result"]) == (source["status"], source["result"])
    assert shown["budget"]["used"]["nodes"] == source["budget"]["used"]["nodes"]
    tether(home, "import", str(saved))  # twice: a no-op
