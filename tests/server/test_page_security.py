"""Issue 20 in real headless Chromium: hostile blobs never run script, the page's cookie
reaches no other server, forged live events never reach the page, unknown runs stop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from tests.server.agents import chain_input
from tests.server.kit import CHAIN, FILES, FORGER, TOKEN, ServerProcess, start_server
from tests.server.test_page import browser, wait_page
from tether.client import TetherClient

__all__ = ["browser"]  # the fixture, shared with test_page

MARK = "XSS-RAN"
HOSTILE = {
    "text/html": f"<html><body><script>document.title='{MARK}'</script>hi</body></html>",
    "image/svg+xml": (
        '<svg xmlns="http://www.w3.org/2000/svg" onload="document.title=\'XSS-RAN\'">'
        f"<script>document.title='{MARK}'</script></svg>"
    ),
}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = start_server(
        tmp_path, f"sqlite:///{tmp_path / 'tether.db'}", "--agent", FILES, "--agent", FORGER
    )
    yield proc
    assert proc.stop() == 0


@pytest.mark.parametrize("media_type", sorted(HOSTILE))
async def test_a_hostile_blob_opened_in_the_browser_runs_no_script(
    server: ServerProcess, browser: WebDriver, tmp_path: Path, media_type: str
) -> None:
    async with TetherClient(server.url, TOKEN) as client:
        run_id = (
            await client.start(FILES, {"text": HOSTILE[media_type], "media_type": media_type})
        )["run_id"]
        records = [e async for e in client.events(run_id)]
    sha = records[-1].data["result"]["sha256"]
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    browser.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
    )
    # The browser sends the API token itself, as a credentialed user's would: the worst case.
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd(
        "Network.setExtraHTTPHeaders", {"headers": {"Authorization": f"Bearer {TOKEN}"}}
    )
    browser.get(f"{server.url}/v1/blobs/{sha}?run_id={run_id}")
    # Handshake: the file arrives as a download (or, on a broken server, renders here).
    async with asyncio.timeout(30):
        while not [p for p in downloads.iterdir() if not p.name.endswith(".crdownload")]:
            if browser.title == MARK:
                break
            await asyncio.sleep(0.1)  # polling a browser: there is no event to wait on
    assert browser.title != MARK
    assert MARK not in browser.execute_script("return document.documentElement.outerHTML")
    [saved] = list(downloads.iterdir())
    assert saved.read_text() == HOSTILE[media_type]


class _CookieEcho(BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Cookie")))
        body = b"<title>other</title>other server"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


async def test_the_page_cookie_reaches_no_other_port(
    server: ServerProcess, browser: WebDriver
) -> None:
    async with TetherClient(server.url, TOKEN) as client:
        run_id = (await client.start(CHAIN, chain_input(2, 1, 0)))["run_id"]
        other_run = (await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"]
    browser.get(f"{server.url}/runs/{run_id}?token={TOKEN}")
    state = await wait_page(browser, lambda s: s["finished"])  # the cookie works for the page
    assert state["status"] == "succeeded"
    cookies = browser.get_cookies()
    assert cookies and all(TOKEN not in c["value"] for c in cookies)
    assert all(c["httpOnly"] and c["sameSite"] == "Strict" for c in cookies)
    echo = ThreadingHTTPServer(("127.0.0.1", 0), _CookieEcho)
    _CookieEcho.seen = []
    thread = threading.Thread(target=echo.serve_forever, daemon=True)
    thread.start()
    try:
        other = f"http://127.0.0.1:{echo.server_address[1]}"
        for path in ("/", "/v1/runs?limit=500", f"/runs/{other_run}", "/runs/"):
            browser.get(other + path)
            assert browser.title == "other"
    finally:
        echo.shutdown()
        thread.join(timeout=10)
        echo.server_close()
    assert {"/", f"/runs/{other_run}", "/runs/"} <= {path for path, _ in _CookieEcho.seen}
    assert [cookie for _, cookie in _CookieEcho.seen] == [None] * len(_CookieEcho.seen)


async def test_the_page_never_takes_a_forged_live_event_for_a_record(
    server: ServerProcess, browser: WebDriver, tmp_path: Path
) -> None:
    until = tmp_path / "seen-one"
    async with TetherClient(server.url, TOKEN) as client:
        run_id = (await client.start(FORGER, {"until": str(until)}))["run_id"]
    browser.get(f"{server.url}/runs/{run_id}?token={TOKEN}")
    await wait_page(browser, lambda s: browser.execute_script("return window.tetherState.live") > 0)
    until.touch()  # the page has seen forged events: let the forger fail now
    state = await wait_page(browser, lambda s: s["finished"])
    assert state["status"] == "failed"
    assert state["seqs"] == list(range(len(state["seqs"])))  # no seq 10**9 among them
    assert [n for n, _ in state["nodes"]] != ["not-me"]


async def test_the_page_of_an_unknown_run_says_so_and_stops(
    server: ServerProcess, browser: WebDriver
) -> None:
    browser.get(f"{server.url}/runs/no-such-run?token={TOKEN}")
    assert "no such run" in browser.page_source
    assert browser.execute_script("return window.tetherState === undefined")
