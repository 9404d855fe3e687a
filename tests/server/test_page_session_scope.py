"""A page session opens its run's page and what the page reads, by GET only, as a cookie
only: never the JSON API, never a write, never as a Bearer token (issue 37's audit: four
mutants of the page-session checks survived every test before these)."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.server.agents import chain_input
from tests.server.kit import CHAIN, FILES, TOKEN, running
from tether.blobs.local import LocalBlobStore
from tether.client import TetherClient
from tether.store.base import Store

AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def session_of(http: httpx.AsyncClient, run_id: str) -> str:
    """The page session cookie's value, as the page sets it for `run_id`."""
    page = await http.get(f"/runs/{run_id}", headers=AUTH)
    name, _, value = page.headers["set-cookie"].split(";")[0].partition("=")
    assert name == "tether_page"
    http.cookies.clear()  # sent only where a test says so
    return value


async def test_a_page_session_is_never_a_bearer_token_for_the_api(sqlite_store: Store) -> None:
    async with (
        running(sqlite_store) as (url, _),
        TetherClient(url, TOKEN) as client,
        httpx.AsyncClient(base_url=url) as http,
    ):
        run_id = (await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"]
        session = await session_of(http, run_id)
        as_bearer = {"Authorization": f"Bearer {session}"}
        for method, path in [
            ("GET", "/v1/runs"),
            ("GET", f"/v1/runs/{run_id}"),
            ("GET", f"/v1/runs/{run_id}/events"),
            ("GET", f"/runs/{run_id}/view"),
            ("POST", "/v1/runs"),
            ("POST", f"/v1/runs/{run_id}/cancel"),
        ]:
            r = await http.request(method, path, headers=as_bearer, json={"agent": CHAIN})
            assert r.status_code == 401, (method, path, r.status_code)
        # The same session as the cookie does open the run's page view: the refusals
        # above are about how it was sent, not a bad session.
        ok = await http.get(f"/runs/{run_id}/view", headers={"Cookie": f"tether_page={session}"})
        assert ok.status_code == 200


async def test_the_page_cookie_never_authorizes_a_write(sqlite_store: Store) -> None:
    async with (
        running(sqlite_store) as (url, _),
        TetherClient(url, TOKEN) as client,
        httpx.AsyncClient(base_url=url) as http,
    ):
        run_id = (await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"]
        cookie = {"Cookie": f"tether_page={await session_of(http, run_id)}"}
        for path in (
            f"/v1/runs/{run_id}/cancel",
            f"/v1/runs/{run_id}/resume",
            f"/v1/runs/{run_id}/retry",
            f"/v1/runs/{run_id}/fork",
            f"/v1/runs/{run_id}/signal/approve",
            f"/runs/{run_id}",
            f"/runs/{run_id}/events",
            "/v1/runs",
        ):
            for method in ("POST", "PUT", "DELETE"):
                r = await http.request(method, path, headers=cookie, json={})
                assert r.status_code == 401, (method, path, r.status_code)


async def test_the_page_cookie_opens_its_runs_blobs(sqlite_store: Store, tmp_path: Path) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    async with (
        running(sqlite_store, blobs=blobs) as (url, _),
        TetherClient(url, TOKEN) as client,
        httpx.AsyncClient(base_url=url) as http,
    ):
        run_id = (await client.start(FILES, {"text": "hello, page"}))["run_id"]
        records = [e.data async for e in client.events(run_id)]
        sha = records[-1]["result"]["sha256"]
        other = (await client.start(FILES, {"text": "another run"}))["run_id"]
        cookie = {"Cookie": f"tether_page={await session_of(http, run_id)}"}
        r = await http.get(f"/runs/{run_id}/blobs/{sha}", headers=cookie)
        assert r.status_code == 200 and r.content == b"hello, page"
        # Its session opens nothing of another run's, and no blob without the cookie.
        assert (await http.get(f"/runs/{other}/blobs/{sha}", headers=cookie)).status_code == 401
        assert (await http.get(f"/runs/{run_id}/blobs/{sha}")).status_code == 401
