"""The live page lists a parked run's pending waits; a person with the token answers one
from the page (headless Chromium clicks Approve) and the run finishes."""

from __future__ import annotations

from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.server.kit import TOKEN, start_server
from tests.server.test_page import browser, wait_page
from tether.client import TetherClient

APPROVALS = "tests.waits_agents:approvals"
__all__ = ["browser"]  # the fixture, used by name


async def test_a_person_approves_a_wait_from_the_page_and_the_run_finishes(
    tmp_path: Path, browser: WebDriver
) -> None:
    db = f"sqlite:///{tmp_path / 'tether.db'}"
    server = start_server(tmp_path, db, "--agent", APPROVALS)
    try:
        async with TetherClient(server.url, TOKEN) as client:
            run_id = (await client.start(APPROVALS, {"n": 1}))["run_id"]
        browser.get(f"{server.url}/runs/{run_id}?token={TOKEN}")
        await wait_page(browser, lambda s: s["status"] == "waiting")
        await wait_page(
            browser, lambda s: bool(browser.find_elements(By.CSS_SELECTOR, ".wait button"))
        )
        wait = browser.find_element(By.CSS_SELECTOR, "#waits .wait")
        assert wait.get_attribute("data-key") == "approve-0"
        assert '"tool": "delete_file"' in wait.find_element(By.TAG_NAME, "pre").text
        approve = wait.find_element(By.XPATH, ".//button[text()='Approve']")
        approve.click()  # no token typed yet: nothing is sent
        assert "enter the API token first" in wait.text
        browser.find_element(By.ID, "token").send_keys("wrong")
        approve.click()
        await wait_page(browser, lambda s: "refused (401)" in wait.text)
        token = browser.find_element(By.ID, "token")
        token.clear()
        token.send_keys(TOKEN)
        approve.click()
        done = await wait_page(browser, lambda s: s["finished"], within=90)
        browser.save_screenshot(str(tmp_path / "page.png"))
    finally:
        server.stop()
    assert done["status"] == "succeeded"
    assert browser.find_element(By.ID, "waits").get_attribute("hidden") is not None
