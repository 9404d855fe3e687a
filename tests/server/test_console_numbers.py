"""One source for every number (issue 40), in headless Chromium: a run page's status word
and budget bars are the API's (`GET /v1/runs/{id}`), which are `tether show`'s. The wall
time is the time a run spent running: an approval run that waited, and a fork (whose
first record is its source's), show the API's wall time, not first record to last."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from selenium.webdriver.remote.webdriver import WebDriver

from tests.server.kit import APPROVAL, TOKEN, ServerProcess, child_env
from tests.server.test_console import server, until, wait_page
from tests.server.test_page import browser
from tether.client import TetherClient

__all__ = ["browser", "server"]  # the fixtures, used by name

LIMIT_S = 60  # every run here has a wall-clock limit: the bar is drawn against it


def page_numbers(driver: WebDriver) -> dict[str, Any]:
    """What the run page draws: its status word, and the wall bar's text and label."""
    numbers: dict[str, Any] = driver.execute_script(
        "const box = document.getElementById('budget'), kids = [...box.children];"
        "const i = kids.findIndex(e => e.textContent === 'wall');"
        "const s = window.tetherState;"
        "return {badge: document.getElementById('status').textContent,"
        # The records the numbers are for: the view's (a page that computed its own
        # numbers, as the console once did, drew them for the records it had).
        " records: Number(box.dataset.records || (s ? s.seqs.length : -1)),"
        " wall_ms: Number(box.dataset.wallMs || -1),"
        " wall: i < 0 ? '' : kids[i + 2].textContent,"
        " label: i < 0 ? '' : kids[i + 1].getAttribute('aria-label'),"
        " span_us: s && s.records.length ? s.records.at(-1).at_us - s.records[0].at_us : 0};"
    )
    return numbers


async def drawn_as_api(driver: WebDriver, client: TetherClient, run_id: str) -> dict[str, Any]:
    """Once the page drew the API's view of the run's last record (the page asks for it
    after records arrive), what it draws and what the API says."""
    await until(lambda: page_numbers(driver)["records"] > 0)
    while True:
        api = await client.get(run_id)
        records = api["records"]
        drawn = await until(
            lambda: (n := page_numbers(driver))["records"] >= records and n,  # noqa: B023
            within=30,
        )
        if drawn["records"] == api["records"]:
            return {"page": drawn, "api": api}
        # a record came after the API answered: ask again


def show_wall(home: Path, run_id: str) -> str:
    """`tether show`'s wall time, read off the server's store."""
    out = subprocess.run(
        [sys.executable, "-m", "tether", "--db", f"sqlite:///{home / 'tether.db'}", "show", run_id],
        cwd=home, env=child_env(), capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    found = re.search(r"wall (\d+\.\d)s", out)
    assert found, out
    return found.group(1)


def assert_one_source(seen: dict[str, Any], home: Path, run_id: str) -> None:
    page, api = seen["page"], seen["api"]
    wall_ms = api["budget"]["used"]["wall_ms"]
    assert page["wall"] == f"{wall_ms / 1000:.1f} s / {LIMIT_S:.1f} s"
    assert page["wall_ms"] == wall_ms == api["timings"]["wall_ms"]
    assert page["label"] == f"wall: {round(wall_ms / LIMIT_S / 10)}% of the limit"
    assert page["badge"] == api["state"]
    assert show_wall(home, run_id) == f"{wall_ms / 1000:.1f}"


async def test_an_approval_run_that_waited_and_its_fork_show_the_api_s_wall_time(
    server: ServerProcess, browser: WebDriver, tmp_path: Path
) -> None:
    budget = {"max_wall_s": LIMIT_S}
    async with TetherClient(server.url, TOKEN) as client:
        run_id = (await client.start(APPROVAL, budget=budget))["run_id"]
        browser.get(f"{server.url}/runs/{run_id}?token={TOKEN}")
        await wait_page(browser, lambda s: s["status"] == "waiting")
        waiting = await drawn_as_api(browser, client, run_id)
        assert_one_source(waiting, tmp_path, run_id)
        assert waiting["api"]["state"] == "waiting"

        # Answered once the page drew it: the run waited at least that long, uncounted.
        await client.signal(run_id, "approve", {"approve": True})
        await wait_page(browser, lambda s: s["finished"])
        done = await drawn_as_api(browser, client, run_id)
        assert_one_source(done, tmp_path, run_id)
        assert done["api"]["state"] == "succeeded"
        assert done["api"]["budget"]["used"]["wall_ms"] < done["page"]["span_us"] / 1000

        # A fork before the wait: its first records are its source's, from before the
        # source waited; the time between its fork point and its own start is not its.
        fork_id = (await client.fork(run_id, at_seq=1))["run_id"]
        browser.get(f"{server.url}/runs/{fork_id}?token={TOKEN}")
        await wait_page(browser, lambda s: s["status"] == "waiting")
        await client.signal(fork_id, "approve", {"approve": True})
        await wait_page(browser, lambda s: s["finished"])
        forked = await drawn_as_api(browser, client, fork_id)
        assert forked["api"]["forked_from"]["run_id"] == run_id
        assert_one_source(forked, tmp_path, fork_id)
        assert forked["api"]["state"] == "succeeded"
        # Its first record is its source's seq 0: first to last includes the source's wait.
        assert forked["page"]["span_us"] >= done["page"]["span_us"]
        assert forked["api"]["budget"]["used"]["wall_ms"] < done["page"]["span_us"] / 1000
