"""The run page's history slider and "Fork from here" in headless Chromium (issue 13): the
slider, moved with the keyboard, redraws the graph, budget and outcome as they were at a
seq (the budget is what `GET /v1/runs/{id}?at=` says), and forking there opens the fork's
page, which says where it came from and runs to the source's answer."""

from __future__ import annotations

from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

from tests.server.agents import chain_input, chain_nodes
from tests.server.kit import CHAIN, TOKEN, ServerProcess
from tests.server.test_console import finish, server, sign_in, until, wait_page
from tests.server.test_page import browser
from tether.client import TetherClient

__all__ = ["browser", "server"]  # the fixtures, used by name


def drawn(driver: WebDriver) -> dict[str, Any]:
    """What the page draws now: the slider, the graph's nodes, the budget and outcome."""
    view: dict[str, Any] = driver.execute_script(
        "const at = document.getElementById('at');"
        "return {at: Number(at.value), max: Number(at.max),"
        " text: at.getAttribute('aria-valuetext'),"
        " nodes: document.querySelectorAll('#graph g.node').length,"
        " completed: document.querySelectorAll('#graph g.node.completed').length,"
        " budget: document.getElementById('budget').innerText,"
        " budgetRecords: Number(document.getElementById('budget').dataset.records),"
        " outcome: document.getElementById('outcome').innerText,"
        " past: document.body.classList.contains('past'),"
        " fork: !document.getElementById('fork').disabled};"
    )
    return view


async def test_the_slider_shows_the_run_at_a_seq_and_forks_from_there(
    server: ServerProcess, browser: WebDriver
) -> None:
    async with TetherClient(server.url, TOKEN) as client:
        run_id = (await client.start(CHAIN, chain_input(4, 1, 0)))["run_id"]
        assert await finish(client, run_id) == "succeeded"
        source = await client.get(run_id)
        last = source["records"] - 1
        browser.get(f"{server.url}/runs/{run_id}?token={TOKEN}")
        await wait_page(browser, lambda s: s["finished"])
        now = await until(lambda: (v := drawn(browser))["max"] == last and v)
        assert (now["at"], now["past"], now["fork"]) == (last, False, False)  # its end
        assert now["completed"] == chain_nodes(4, 1)

        # The keyboard moves it: Home is the run's first record, each arrow one record on.
        slider = browser.find_element(By.ID, "at")
        slider.send_keys(Keys.HOME)
        # The key moves the slider's value at once; the page's redraw (which writes the
        # slider's text from the seq it drew) says when the graph is the one at that seq.
        first = await until(lambda: (v := drawn(browser))["text"].startswith("seq 0 of") and v)
        assert first["at"] == 0
        assert (first["completed"], first["past"]) == (0, True)
        assert first["text"].startswith(f"seq 0 of {last}: run_started")
        assert "not finished yet" in first["outcome"]
        for seq in range(1, 4):
            slider.send_keys(Keys.ARROW_RIGHT)
            # The budget is the API's as of that seq (GET ?at=), drawn once it comes.
            then = await until(
                lambda seq=seq: (
                    (v := drawn(browser))["text"].startswith(f"seq {seq} of")
                    and v["budgetRecords"] == seq + 1
                    and v
                )
            )
            assert then["at"] == seq
            api = await client.get(run_id, at_seq=seq)
            done = [n for n in api["nodes"] if n["status"] == "completed"]
            assert then["completed"] == len(done) == api["budget"]["used"]["nodes"]
            assert then["nodes"] == len(api["nodes"]) and then["fork"]
            assert f"{len(done)} (no limit)" in then["budget"]
        assert 0 < then["completed"] < chain_nodes(4, 1)

        # Back to live, then back to seq 3 to fork there: the tab has no API token yet.
        browser.find_element(By.ID, "at-live").click()
        assert await until(lambda: (v := drawn(browser))["at"] == last and not v["past"])
        slider.send_keys(Keys.HOME, Keys.ARROW_RIGHT * 3)
        await until(lambda: drawn(browser)["at"] == 3)
        browser.find_element(By.ID, "fork").click()
        sign_in(browser, TOKEN)
        # The tab navigates to the fork's page: between two documents there is no body.
        shown = "return document.body ? document.body.dataset.runId : null"
        fork_id = await until(
            lambda: (r := browser.execute_script(shown)) not in (None, run_id) and r
        )
        state = await wait_page(browser, lambda s: s["finished"])
        assert browser.execute_script(shown) == fork_id
        origin = await until(lambda: browser.find_element(By.ID, "origin").text)
        assert origin == f"· forked from {run_id} at seq 3"
        assert state["status"] == "succeeded"
        fork = await client.get(fork_id)
        assert fork["forked_from"] == {"run_id": run_id, "seq": 3, "overridden_node_ids": []}
        assert fork["result"] == source["result"]
        assert browser.execute_script("return location.pathname") == f"/runs/{fork_id}"
