"""The console's sign-in in headless Chromium (issue 40): its help names the variable
`tether serve` reads the token from, a signed-out runs list is the sign-in form alone, a
signed-in tab opening an unknown run's page sees "no such run" and nothing of a sign-in,
and the console's icon is served to anyone (no 401 in the browser's log)."""

from __future__ import annotations

from pathlib import Path

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.server.agents import chain_input
from tests.server.kit import CHAIN, TOKEN, ServerProcess, start_server
from tests.server.test_console import finish, listed, server, sign_in, until
from tests.server.test_page import browser
from tether.client import TetherClient

__all__ = ["browser", "server"]  # the fixtures, used by name


def shown(driver: WebDriver, element_id: str) -> bool:
    return bool(driver.find_element(By.ID, element_id).is_displayed())


def icon_failures(driver: WebDriver) -> list[str]:
    """What the browser's log says about an icon that failed to load (a 401, say). A
    signed-out page's API calls answer 401 as they should, and are not counted."""
    return [
        e["message"]
        for e in driver.get_log("browser")
        if "Failed to load" in e["message"] and "favicon" in e["message"]
    ]


async def test_the_sign_in_help_names_the_variable_tether_serve_reads(
    tmp_path: Path, browser: WebDriver
) -> None:
    first = start_server(tmp_path, f"sqlite:///{tmp_path / 'a.db'}")
    try:
        browser.get(first.url + "/")
        help_text = await until(
            lambda: browser.find_element(By.CSS_SELECTOR, "#signin form p").text
        )
    finally:
        assert first.stop() == 0
    [variable] = [w for w in help_text.replace(")", " ").split() if w.startswith("TETHER_")]
    # Followed as written: a server given its token by that variable (no --token) takes it.
    served = start_server(
        tmp_path,
        f"sqlite:///{tmp_path / 'b.db'}",
        env={variable: "from-the-env-0123456789"},
        token=None,
    )
    try:
        async with httpx.AsyncClient(base_url=served.url) as http:
            ok = await http.get(
                "/v1/runs", headers={"Authorization": "Bearer from-the-env-0123456789"}
            )
        assert ok.status_code == 200, (variable, ok.status_code)
    finally:
        assert served.stop() == 0
    assert variable == "TETHER_API_TOKEN"


async def test_signed_out_the_runs_list_is_the_sign_in_form_alone(
    server: ServerProcess, browser: WebDriver
) -> None:
    async with TetherClient(server.url, TOKEN) as client:
        run_id = (await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"]
        await finish(client, run_id)
    browser.get(server.url + "/")
    await until(lambda: shown(browser, "signin-token"))
    for part in ("filters", "runs", "pager", "empty"):
        assert not shown(browser, part), part
    sign_in(browser, TOKEN)
    assert await until(lambda: listed(browser) == [(run_id, "top")])
    for part in ("filters", "runs", "pager"):
        assert shown(browser, part), part
    assert not browser.find_elements(By.ID, "signin-token")
    assert icon_failures(browser) == []


async def test_signed_in_an_unknown_run_s_page_says_only_no_such_run(
    server: ServerProcess, browser: WebDriver
) -> None:
    browser.get(server.url + "/")
    sign_in(browser, TOKEN)  # the tab keeps the token; no page cookie for the unknown run
    await until(lambda: shown(browser, "runs"))
    browser.get(f"{server.url}/runs/nosuchrun")
    await until(lambda: browser.find_element(By.TAG_NAME, "h1").text == "no such run")
    text = browser.find_element(By.TAG_NAME, "body").text
    assert "needs the API token" not in text and "Sign in" not in text
    assert "There is no run nosuchrun on this server" in text
    assert browser.title == "tether: no such run"
    assert not browser.find_elements(By.ID, "signin-token")
    assert icon_failures(browser) == []


async def test_the_console_icon_is_public(server: ServerProcess, browser: WebDriver) -> None:
    async with httpx.AsyncClient(base_url=server.url) as http:
        for path in ("/favicon.ico", "/favicon.svg"):
            icon = await http.get(path)
            assert icon.status_code == 200, path
            assert icon.headers["content-type"].startswith("image/svg+xml")
            assert icon.content.startswith(b"<svg")
    browser.get(server.url + "/")
    await until(lambda: shown(browser, "signin-token"))
    # Every page links its icon; what the link names loads without credentials.
    status = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "const link = document.querySelector('link[rel=icon]');"
        "if (!link) { done(0); return; }"
        "fetch(link.href, {credentials: 'omit'}).then(r => done(r.status), () => done(-1));"
    )
    assert status == 200
    assert icon_failures(browser) == []
