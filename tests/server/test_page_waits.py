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


async def test_reject_and_a_json_answer_from_the_page_and_a_payload_the_schema_refuses(
    tmp_path: Path, browser: WebDriver
) -> None:
    db = f"sqlite:///{tmp_path / 'tether.db'}"
    server = start_server(tmp_path, db, "--agent", APPROVALS)
    try:
        async with TetherClient(server.url, TOKEN) as client:
            run_id = (await client.start(APPROVALS, {"n": 2}))["run_id"]
            browser.get(f"{server.url}/runs/{run_id}?token={TOKEN}")
            await wait_page(
                browser, lambda s: len(browser.find_elements(By.CSS_SELECTOR, "#waits .wait")) == 2
            )
            browser.find_element(By.ID, "token").send_keys(TOKEN)
            first = browser.find_element(By.CSS_SELECTOR, '#waits .wait[data-key="approve-0"]')
            first.find_element(By.XPATH, ".//button[text()='Reject']").click()
            # Answered: once its record arrives the page drops it from the pending waits.
            await wait_page(
                browser,
                lambda s: not browser.find_elements(By.CSS_SELECTOR, '[data-key="approve-0"]'),
            )
            second = browser.find_element(By.CSS_SELECTOR, '#waits .wait[data-key="approve-1"]')
            raw = second.find_element(By.TAG_NAME, "textarea")
            send = second.find_element(By.XPATH, ".//button[text()='Send JSON']")
            raw.send_keys('{"approve": "yes"}')  # not a boolean: the wait's schema refuses it
            send.click()
            await wait_page(browser, lambda s: "refused (422)" in second.text)
            assert "approve" in second.text and "boolean" in second.text
            raw.clear()
            raw.send_keys('{"approve": true}')
            send.click()
            done = await wait_page(browser, lambda s: s["finished"], within=90)
            run = await client._call("GET", f"/v1/runs/{run_id}", params={"outputs": 1})
    finally:
        server.stop()
    assert done["status"] == "succeeded"
    acts = {n["output"]["i"]: n["output"]["outcome"] for n in run["nodes"] if n["kind"] == "act"}
    assert acts == {0: "rejected", 1: "done"}
