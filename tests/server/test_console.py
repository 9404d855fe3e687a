"""The web console in real headless Chromium: the runs list and its filters, a run's
input, answer and node outputs (an image blob too), sub-agent links, the sign-in form,
the unknown-run page, and the cancel and resume buttons."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.common.exceptions import (
    JavascriptException,
    NoSuchElementException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from tests.server.agents import chain_input
from tests.server.kit import (
    APPROVAL,
    CHAIN,
    CONSOLE,
    FILES,
    FORGER,
    TOKEN,
    ServerProcess,
    start_server,
)
from tests.server.test_page import browser
from tests.server.test_page import wait_page as wait_state
from tether.client import TetherClient

__all__ = ["browser"]  # the fixture, shared with test_page


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    agents = [a for name in (CONSOLE, APPROVAL, FILES, FORGER) for a in ("--agent", name)]
    proc = start_server(tmp_path, f"sqlite:///{tmp_path / 'tether.db'}", *agents)
    yield proc
    assert proc.stop() == 0


async def until(check: Any, within: float = 60) -> Any:
    """Poll the browser until `check()` is truthy; there is no event to wait on. A tab
    between two documents (a sign-in or a link navigates it) has no elements and no body
    yet: what `check` raises for that counts as not yet, and the last of it is raised if
    `check` never passes."""
    failed: WebDriverException | None = None
    try:
        async with asyncio.timeout(within):
            while True:
                try:
                    value = check()
                except _BETWEEN_DOCUMENTS as exc:
                    failed, value = exc, None
                if value:
                    return value
                await asyncio.sleep(0.1)
    except TimeoutError:
        if failed is not None:
            raise failed from None
        raise


_BETWEEN_DOCUMENTS = (NoSuchElementException, StaleElementReferenceException, JavascriptException)


async def finish(client: TetherClient, run_id: str) -> str:
    async for event in client.events(run_id):
        if event.data.get("body") == "run_finished":
            return str(event.data["status"])
    return (await client.get(run_id))["status"]  # type: ignore[no-any-return]


async def wait_page(driver: WebDriver, check: Any, within: float = 60) -> dict[str, Any]:
    """Wait for a run's page to be open (a sign-in reloads it), then for `check`."""
    await until(lambda: driver.execute_script("return window.tetherState !== undefined"))
    return await wait_state(driver, check, within)


async def until_paused(client: TetherClient, run_id: str) -> None:
    """The run's row says paused (its pause is recorded first, then the row changes)."""
    async with asyncio.timeout(60):
        status = ""
        while status != "paused":
            status = (await client.get(run_id))["status"]
            await asyncio.sleep(0.05)  # polling the API: there is no event to wait on


async def panel_read(driver: WebDriver, selector: str) -> list[dict[str, str]]:
    """Text and href of each element of the node panel that matches `selector`, once there
    is one. Read in one script: the panel is redrawn whole on every draw (the children's
    fetch after the run ends draws once more), so an element found by one call can be gone
    by the next."""
    script = (
        "return [...document.querySelectorAll('#panel ' + arguments[0])]"
        ".map(e => ({text: e.innerText, href: e.href || ''}));"
    )
    return await until(lambda: driver.execute_script(script, selector))  # type: ignore[no-any-return]


def on_node(driver: WebDriver, kind: str, act: Any, within: float = 30) -> None:
    """Find the graph's node of `kind` and act on it. The graph is drawn after the page's
    state changes and redraws as records arrive, so the node may not be there yet, or an
    element found a moment ago may be gone: look again until `within` seconds pass."""
    deadline = time.monotonic() + within
    while True:
        try:
            act(driver.find_element(By.CSS_SELECTOR, f'#graph g.node[aria-label^="{kind}"]'))
            return
        except (StaleElementReferenceException, NoSuchElementException):
            if time.monotonic() > deadline:
                raise AssertionError(f"no {kind} node in the graph after {within:g} s") from None
            time.sleep(0.05)  # polling a browser: there is no event to wait on


def listed(driver: WebDriver) -> list[tuple[str, str]]:
    """(run id, "top" or "child") of each row of the runs list, in order."""
    rows: list[list[str]] = driver.execute_script(
        "return [...document.querySelectorAll('#runs tbody tr')].map("
        " r => [r.dataset.runId, r.classList.contains('child') ? 'child' : 'top'])"
    )
    return [(a, b) for a, b in rows]


def sign_in(driver: WebDriver, token: str) -> None:
    field = driver.find_element(By.ID, "signin-token")
    field.clear()
    field.send_keys(token, Keys.ENTER)


async def test_the_runs_list_filters_searches_nests_children_and_updates_live(
    server: ServerProcess, browser: WebDriver
) -> None:
    async with TetherClient(server.url, TOKEN) as client:
        tour = (await client.start(CONSOLE, {"question": "why?"}))["run_id"]
        done = (await client.start(CHAIN, chain_input(2, 1, 0)))["run_id"]
        paused = (await client.start(CHAIN, chain_input(4, 1, 0), budget={"max_nodes": 1}))[
            "run_id"
        ]
        for run_id in (tour, done):
            await finish(client, run_id)
        await until_paused(client, paused)
        child = f"{tour}."
        browser.get(server.url + "/")
        sign_in(browser, "wrong-token")
        await until(lambda: "not accepted" in browser.page_source)
        sign_in(browser, TOKEN)
        rows = await until(lambda: len(listed(browser)) >= 4 and listed(browser))
        # Newest first; the tour's sub-agent run right under it, marked as a child.
        assert [r for r, _ in rows if not r.startswith(child)] == [paused, done, tour]
        [(kid, kind)] = [r for r in rows if r[0].startswith(child)]
        assert kind == "child" and rows.index((kid, kind)) == rows.index((tour, "top")) + 1
        usage = browser.execute_script(
            "return [...document.querySelectorAll(`#runs tr[data-run-id]`)]"
            ".filter(r => r.dataset.runId === arguments[0])[0].innerText",
            tour,
        )
        assert "$0.0021" in usage and "150" in usage  # cost and tokens of the tour

        Select(browser.find_element(By.ID, "f-status")).select_by_visible_text("paused")
        assert await until(lambda: listed(browser) == [(paused, "top")])
        assert "status=paused" in browser.current_url
        Select(browser.find_element(By.ID, "f-status")).select_by_visible_text("any")
        browser.find_element(By.ID, "f-agent").send_keys(CONSOLE)
        assert await until(lambda: listed(browser) == [(tour, "top"), (kid, "child")])
        browser.find_element(By.ID, "f-agent").clear()
        browser.find_element(By.ID, "f-q").send_keys(done[:6])
        assert await until(lambda: listed(browser) == [(done, "top")])
        browser.find_element(By.ID, "f-q").send_keys(Keys.BACKSPACE * 6)  # fires input events
        await until(lambda: len(listed(browser)) == 4)

        # Live: a run started elsewhere shows up without a reload.
        fetches = browser.execute_script("return window.tetherList.fetches")
        fresh = (await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"]
        await until(lambda: listed(browser)[0] == (fresh, "top"))
        assert browser.execute_script("return window.tetherList.fetches") > fetches
        assert browser.execute_script("return location.pathname") == "/"


async def test_the_runs_list_pages(server: ServerProcess) -> None:
    async with TetherClient(server.url, TOKEN) as client:
        ids = [(await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"] for _ in range(5)]
    async with httpx.AsyncClient(
        base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}
    ) as http:
        first = (await http.get("/v1/runs", params={"limit": 3, "agent": CHAIN})).json()
        assert first["next"] is not None and "agent=" in first["next"]
        second = (await http.get(first["next"])).json()
    assert [r["run_id"] for r in first["runs"] + second["runs"]] == ids[::-1]
    assert second["next"] is None


async def test_a_run_page_shows_input_answer_tokens_outputs_an_image_and_child_links(
    server: ServerProcess, browser: WebDriver, tmp_path: Path
) -> None:
    gate = tmp_path / "go"
    async with TetherClient(server.url, TOKEN) as client:
        run_id = (await client.start(CONSOLE, {"question": "why?", "gate": str(gate)}))["run_id"]
    browser.get(f"{server.url}/runs/{run_id}?token={TOKEN}")
    await until(lambda: browser.find_element(By.ID, "link").text == "live")
    gate.touch()  # the page listens: now the plan node streams its tokens
    await wait_page(browser, lambda s: s["finished"])
    assert '"question": "why?"' in browser.find_element(By.ID, "input").text
    assert browser.find_element(By.ID, "outcome-title").text == "answer"
    assert browser.find_element(By.ID, "outcome").text == "tether keeps every node"
    turns = browser.find_elements(By.CSS_SELECTOR, "#tokens .turn")
    assert len(turns) == 1 and "turn 1 · plan" in turns[0].text
    assert "first look it up, then draw it" in turns[0].text

    # The draw node's panel: its output, its cost, and the PNG it attached, shown inline.
    on_node(browser, "draw", lambda node: node.click())
    panel = browser.find_element(By.ID, "panel")
    await until(lambda: panel.find_elements(By.TAG_NAME, "img"))
    assert "$0.0021" in panel.text and "120 in · 30 out" in panel.text
    width = await until(
        lambda: browser.execute_script("return document.querySelector('#panel img').naturalWidth")
    )
    assert width == 48  # the real image, read through the page's own session

    # Keyboard: Tab to the research node and open it with Enter; it links its child run.
    on_node(browser, "research", lambda node: node.send_keys(Keys.ENTER))
    await until(lambda: panel.find_elements(By.CSS_SELECTOR, "a.child-run"))
    child = browser.execute_script("return document.querySelector('#panel a.child-run').text")
    assert child.startswith(run_id + ".")
    # Clicked in the page: the panel redraws as records arrive, a found element may go stale.
    browser.execute_script("document.querySelector('#panel a.child-run').click()")
    # Another run: this page session does not reach it, so the sign-in form asks.
    sign_in(browser, TOKEN)
    state = await wait_page(browser, lambda s: s["finished"])
    assert state["status"] == "succeeded"
    assert browser.execute_script("return document.body.dataset.runId") == child
    await until(lambda: run_id in browser.find_element(By.ID, "parent").text)  # drawn next frame


async def test_the_sign_in_form_and_the_unknown_run_page(
    server: ServerProcess, browser: WebDriver
) -> None:
    async with TetherClient(server.url, TOKEN) as client:
        run_id = (await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"]
        await finish(client, run_id)
    async with httpx.AsyncClient(base_url=server.url) as http:
        page = await http.get(f"/runs/{run_id}", headers={"Accept": "text/html"})
        api = await http.get(f"/runs/{run_id}")
    assert page.status_code == 401 and page.headers["www-authenticate"].startswith("Bearer")
    assert page.headers["content-type"].startswith("text/html") and "signin" in page.text
    assert api.status_code == 401 and api.headers["www-authenticate"].startswith("Bearer")
    assert api.json()["error"]["type"] == "unauthorized"

    browser.get(f"{server.url}/runs/{run_id}?token=not-it")
    assert "That token was not accepted" in browser.page_source
    sign_in(browser, "still-not-it")
    await until(lambda: browser.find_element(By.ID, "signin-note").text)
    sign_in(browser, TOKEN)
    state = await wait_page(browser, lambda s: s["finished"])
    assert state["status"] == "succeeded"
    assert browser.execute_script("return location.search") == ""  # no token in the URL

    browser.get(f"{server.url}/runs/no-such-run")  # the tab's token signs in by itself
    await until(lambda: "no such run" in browser.page_source)
    assert browser.execute_script("return window.tetherState === undefined")


async def test_the_cancel_and_resume_buttons(server: ServerProcess, browser: WebDriver) -> None:
    async with TetherClient(server.url, TOKEN) as client:
        paused = (await client.start(CHAIN, chain_input(3, 1, 0), budget={"max_nodes": 1}))[
            "run_id"
        ]
        slow = (await client.start(CHAIN, chain_input(200, 1, 0.3)))["run_id"]
    browser.get(f"{server.url}/runs/{paused}?token={TOKEN}")
    await wait_page(browser, lambda s: s["status"] == "paused")
    assert "budget" in browser.find_element(By.ID, "outcome").text
    await until(lambda: browser.find_element(By.ID, "resume").is_enabled())
    browser.find_element(By.ID, "resume").click()
    nodes = browser.find_element(By.ID, "b-nodes")
    assert nodes.get_attribute("value") == "1"
    nodes.clear()
    nodes.send_keys("lots", Keys.ENTER)
    sign_in(browser, TOKEN)  # changing a run takes the API token, not the page's cookie
    note = browser.find_element(By.ID, "action-note")
    await until(lambda: "budget.max_nodes: Value error, 'lots': not a number" in note.text)
    nodes.clear()
    nodes.send_keys("+50", Keys.ENTER)  # 50 more than the 1 node used: a limit of 51
    state = await wait_page(browser, lambda s: s["finished"])
    assert state["status"] == "succeeded"
    assert browser.execute_script("return window.tetherState.limits.max_nodes") == 51

    browser.get(f"{server.url}/runs/{slow}?token={TOKEN}")
    await wait_page(browser, lambda s: s["completedDrawn"] >= 1)
    await until(lambda: browser.find_element(By.ID, "cancel").is_enabled())
    browser.find_element(By.ID, "cancel").click()  # the tab kept its token: no form
    state = await wait_page(browser, lambda s: s["finished"])
    assert state["status"] == "cancelled"
    assert "cancelled" in browser.find_element(By.ID, "action-note").text


async def test_a_waiting_run_says_what_it_waits_for(
    server: ServerProcess, browser: WebDriver
) -> None:
    async with TetherClient(server.url, TOKEN) as client:
        run_id = (await client.start(APPROVAL))["run_id"]
    browser.get(f"{server.url}/runs/{run_id}?token={TOKEN}")
    await wait_page(browser, lambda s: s["status"] == "waiting")
    await until(lambda: "approve" in browser.find_element(By.ID, "outcome").text)
    assert browser.find_element(By.ID, "outcome-title").text == "waiting"
    assert browser.find_element(By.ID, "cancel").is_enabled()
    browser.find_element(By.ID, "cancel").click()
    sign_in(browser, TOKEN)
    state = await wait_page(browser, lambda s: s["finished"])
    assert state["status"] == "cancelled"


AXE = Path(__file__).resolve().parents[2] / ".cache/axe/node_modules/axe-core/axe.min.js"


def axe_violations(driver: WebDriver) -> list[dict[str, Any]]:
    """axe-core's WCAG 2 A and AA violations on the page the browser shows now."""
    if not AXE.exists():
        pytest.fail(f"the accessibility check needs axe-core at {AXE} (scripts/test.sh)")
    # Evaluated by the driver, which the page's CSP does not govern.
    driver.execute_script(AXE.read_text() + "\nreturn true;")
    result: dict[str, Any] = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21aa']}})"
        ".then(r => done({violations: r.violations.map(v => ({id: v.id, help: v.help,"
        " nodes: v.nodes.map(n => n.target.join(' '))}))}), e => done({error: String(e)}));"
    )
    assert "error" not in result, result
    violations: list[dict[str, Any]] = result["violations"]
    return violations


# Each shown button's look: its text's contrast against what is behind it (the first fill
# of its own or of an ancestor), by axe-core's color functions, whether it has a fill of
# its own, and its border's style.
BUTTON_LOOKS = """
const c = axe.commons.color;
const color = (text) => new c.Color().parseString(text);
const clear = (text) => ["transparent", "rgba(0, 0, 0, 0)"].includes(text);
const behind = (e) => {
  for (; e; e = e.parentElement) {
    const bg = getComputedStyle(e).backgroundColor;
    if (!clear(bg)) return color(bg);
  }
  return color("rgb(255, 255, 255)");
};
return [...document.querySelectorAll("button")].filter((b) => b.offsetParent !== null)
  .map((b) => {
    const style = getComputedStyle(b);
    return {button: b.id || b.textContent, disabled: b.disabled,
            contrast: c.getContrast(behind(b), color(style.color)),
            filled: !clear(style.backgroundColor), border: style.borderTopStyle};
  });
"""


def button_looks(driver: WebDriver) -> list[dict[str, Any]]:
    """How the page's buttons look, enabled and disabled (axe-core loaded already)."""
    looks: list[dict[str, Any]] = driver.execute_script(BUTTON_LOOKS)
    return looks


def disabled_buttons_look_off(driver: WebDriver) -> list[str]:
    """What is wrong with how the page's disabled buttons look, if anything: each must be
    legible (axe's AA contrast, 4.5:1) and plainly not a button to press, not by its text's
    color alone: no fill, a dashed border, and less contrast than every enabled one."""
    looks = button_looks(driver)
    enabled = [b for b in looks if not b["disabled"]]
    disabled = [b for b in looks if b["disabled"]]
    assert enabled and disabled, looks  # the page shows both kinds
    wrong = [f"{b['button']}: {b}" for b in enabled if b["contrast"] < 4.5 or not b["filled"]]
    least = min(b["contrast"] for b in enabled)
    for b in disabled:
        if b["contrast"] < 4.5 or b["filled"] or b["border"] != "dashed" or b["contrast"] >= least:
            wrong.append(f"{b['button']} (disabled): {b}")
    return wrong


def labels_apart(driver: WebDriver) -> list[str]:
    """The resume form's labels whose text and field are not on one line."""
    apart: list[str] = driver.execute_script(
        "return [...document.querySelectorAll('#resume-form label')].filter(l => {"
        " const r = document.createRange(); r.selectNodeContents(l.firstChild);"
        " const t = r.getBoundingClientRect();"
        " const i = l.querySelector('input').getBoundingClientRect();"
        " return t.bottom <= i.top || i.bottom <= t.top;"
        "}).map(l => l.firstChild.textContent.trim());"
    )
    return apart


async def test_the_console_passes_an_automated_accessibility_check(
    server: ServerProcess, browser: WebDriver, tmp_path: Path
) -> None:
    async with TetherClient(server.url, TOKEN) as client:
        tour = (await client.start(CONSOLE, {"question": "why?"}))["run_id"]
        paused = (await client.start(CHAIN, chain_input(3, 1, 0), budget={"max_nodes": 1}))[
            "run_id"
        ]
        waiting = (await client.start(APPROVAL))["run_id"]
        await finish(client, tour)
    browser.set_script_timeout(60)
    found: dict[str, list[dict[str, Any]]] = {}
    browser.get(server.url + "/")
    found["sign-in (list)"] = axe_violations(browser)
    sign_in(browser, TOKEN)
    await until(lambda: len(listed(browser)) >= 3)
    found["runs list"] = axe_violations(browser)
    browser.get(f"{server.url}/runs/{tour}")  # the tab's token signs the page in
    await wait_page(browser, lambda s: s["finished"])
    on_node(browser, "draw", lambda node: node.click())
    await until(lambda: browser.find_elements(By.CSS_SELECTOR, "#panel img"))
    found["run page with a node open"] = axe_violations(browser)
    looks_off = {"finished run": disabled_buttons_look_off(browser)}
    browser.find_element(By.ID, "at").send_keys(Keys.HOME, Keys.ARROW_RIGHT)
    await until(lambda: browser.execute_script("return document.body.classList.contains('past')"))
    found["run page, history slider moved back"] = axe_violations(browser)
    browser.get(f"{server.url}/runs/{paused}")
    await wait_page(browser, lambda s: s["status"] == "paused")
    await until(lambda: browser.find_element(By.ID, "resume").is_enabled())
    browser.find_element(By.ID, "resume").click()
    found["paused run, resume form open"] = axe_violations(browser)
    looks_off["paused run"] = disabled_buttons_look_off(browser)
    assert labels_apart(browser) == []  # "wall s" stayed with its field
    browser.get(f"{server.url}/runs/{waiting}")
    await wait_page(browser, lambda s: s["status"] == "waiting")
    await until(lambda: browser.find_elements(By.CSS_SELECTOR, "#waits .wait button"))
    found["waiting run with its wait"] = axe_violations(browser)
    browser.get(f"{server.url}/runs/no-such-run")
    await until(lambda: "no such run" in browser.page_source)
    found["unknown run"] = axe_violations(browser)
    # The check is live: an image without alt text on the same page is caught.
    browser.execute_script("document.querySelector('main').append(document.createElement('img'))")
    assert "image-alt" in {v["id"] for v in axe_violations(browser)}
    browser.execute_cdp_cmd("Network.clearBrowserCookies", {})  # every path's, not this page's
    browser.execute_script("sessionStorage.clear()")
    browser.get(f"{server.url}/runs/{tour}")
    await until(lambda: browser.find_elements(By.ID, "signin-token"))
    found["sign-in (run page)"] = axe_violations(browser)
    assert {page: v for page, v in found.items() if v} == {}
    assert {page: v for page, v in looks_off.items() if v} == {}
