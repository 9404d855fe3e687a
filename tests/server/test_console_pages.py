"""More of the web console in headless Chromium: the runs list's pages and columns, a failed
run's error (on the page and in its node's panel), and a blob that is not an image, offered
as a download read through the page's own session."""

from __future__ import annotations

from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver, WebElement
from selenium.webdriver.support.ui import Select

from tests.server.agents import chain_input
from tests.server.kit import CHAIN, FILES, FORGER, TOKEN, ServerProcess, start_server
from tests.server.test_console import (
    finish,
    listed,
    on_node,
    panel_read,
    server,
    sign_in,
    until,
    wait_page,
)
from tests.server.test_page import browser
from tether.client import TetherClient
from tether.store.sqlite import SqliteStore

__all__ = ["browser", "server"]  # the fixtures, used by name


def cells(driver: WebDriver) -> list[list[str]]:
    rows: list[list[str]] = driver.execute_script(
        "return [...document.querySelectorAll('#runs tbody tr')]"
        ".map(r => [...r.cells].map(c => c.innerText))"
    )
    return rows


def panel_facts(panel: WebElement) -> dict[str, str]:
    """The node panel's facts (node, kind, status, attempt, timings...) by name, read in one
    script: the panel redraws as the page refreshes, so elements found one by one can go
    stale between two reads."""
    names, values = panel.parent.execute_script(
        "const p = arguments[0];"
        "const text = s => [...p.querySelectorAll(s)].map(e => e.innerText.trim());"
        "return [text('dt'), text('dd')];",
        panel,
    )
    return dict(zip(names, values, strict=True))


async def test_the_runs_list_pages_older_and_newer_with_every_column(
    server: ServerProcess, browser: WebDriver
) -> None:
    async with TetherClient(server.url, TOKEN) as client:
        ids = [(await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"] for _ in range(5)]
        for run_id in ids:
            assert await finish(client, run_id) == "succeeded"
    newest = ids[::-1]
    browser.get(server.url + "/?limit=2")
    sign_in(browser, TOKEN)
    assert await until(lambda: [r for r, _ in listed(browser)] == newest[:2])
    headers = browser.execute_script(
        "return [...document.querySelectorAll('#runs th')].map(h => h.innerText)"
    )
    assert headers == ["run", "status", "agent", "started", "wall", "nodes", "tokens", "cost"]
    run, status, agent, started, wall, nodes, tokens, cost = cells(browser)[0]
    assert (run, status, agent) == (newest[0], "succeeded", CHAIN)
    assert started.endswith(" ago") and wall.endswith(("ms", " s"))
    assert (nodes, tokens, cost) == ("1", "0", "$0.0000")
    older, newer = browser.find_element(By.ID, "next"), browser.find_element(By.ID, "prev")
    assert not newer.is_enabled()
    older.click()
    assert await until(lambda: [r for r, _ in listed(browser)] == newest[2:4])
    assert "offset=2" in browser.current_url and "limit=2" in browser.current_url
    older.click()
    assert await until(lambda: [r for r, _ in listed(browser)] == newest[4:])
    assert await until(lambda: not older.is_enabled())
    assert browser.find_element(By.ID, "page").text == "5\N{EN DASH}5"
    newer.click()
    assert await until(lambda: [r for r, _ in listed(browser)] == newest[2:4])


async def test_a_failed_run_shows_its_error_and_its_node_panel_the_error(
    server: ServerProcess, browser: WebDriver, tmp_path: Path
) -> None:
    until_file = tmp_path / "fail-now"
    until_file.touch()  # the forger fails at once
    async with TetherClient(server.url, TOKEN) as client:
        run_id = (await client.start(FORGER, {"until": str(until_file)}))["run_id"]
        assert await finish(client, run_id) == "failed"
    browser.get(f"{server.url}/runs/{run_id}?token={TOKEN}")
    state = await wait_page(browser, lambda s: s["finished"])
    assert state["status"] == "failed"
    assert browser.find_element(By.ID, "outcome-title").text == "error"
    assert "the forger fails for real" in browser.find_element(By.ID, "outcome").text
    on_node(browser, "forge", lambda node: node.click())
    [error] = await panel_read(browser, "pre.error")
    assert error["text"] == "RuntimeError: the forger fails for real"
    panel = browser.find_element(By.ID, "panel")
    facts = panel_facts(panel)
    assert facts["status"] == "failed" and int(facts["attempt"]) >= 1


async def test_a_blob_that_is_not_an_image_is_a_download(
    server: ServerProcess, browser: WebDriver
) -> None:
    async with TetherClient(server.url, TOKEN) as client:
        run_id = (await client.start(FILES, {"text": "hello, blob"}))["run_id"]
        assert await finish(client, run_id) == "succeeded"
    browser.get(f"{server.url}/runs/{run_id}?token={TOKEN}")
    await wait_page(browser, lambda s: s["finished"])
    on_node(browser, "write", lambda node: node.click())
    [link] = await panel_read(browser, "a[download]")
    assert link["text"].startswith("download (text/plain, 11 B, sha256 ")
    panel = browser.find_element(By.ID, "panel")
    assert panel.find_elements(By.TAG_NAME, "img") == []
    facts = panel_facts(panel)
    assert facts["status"] == "completed" and facts["attempt"] == "1"
    assert facts["wall"].endswith(" ms") and facts["started"] and facts["finished"]
    # The link works with the page's session alone: fetched as the browser would.
    body = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0], {credentials: 'same-origin'}).then(r => r.text()).then(done);",
        link["href"],
    )
    assert body == "hello, blob"


async def test_the_status_filter_tells_orphaned_runs_from_running_ones(
    tmp_path: Path, browser: WebDriver
) -> None:
    db = tmp_path / "tether.db"
    # No worker anywhere: an orphaned run stays orphaned (a worker would adopt it).
    server = start_server(tmp_path, f"sqlite:///{db}", "--workers", "external")
    try:
        async with TetherClient(server.url, TOKEN) as client:
            runs = [await client.start(CHAIN, chain_input(1, 1, 0)) for _ in "ab"]
        dead, alive = (r["run_id"] for r in runs)
        store = SqliteStore(db)
        await store.open_existing()
        try:  # owners that took them: one whose lease ran out a minute ago, one live
            assert await store.leases.take(dead, "gone:1", -60) is not None
            assert await store.leases.take(alive, "here:2", 600) is not None
        finally:
            await store.close()
        browser.get(server.url + "/")
        sign_in(browser, TOKEN)
        await until(lambda: len(listed(browser)) == 2)
        status = Select(browser.find_element(By.ID, "f-status"))
        status.select_by_visible_text("orphaned")
        assert await until(lambda: listed(browser) == [(dead, "top")])
        assert cells(browser)[0][1] == "orphaned"
        status.select_by_visible_text("running")
        assert await until(lambda: listed(browser) == [(alive, "top")])
        assert "status=running" in browser.current_url
    finally:
        assert server.stop() == 0
