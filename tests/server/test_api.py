"""The HTTP API on a real uvicorn in this process: auth, validation, idempotency, runs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from tests.server.agents import chain_input, chain_nodes
from tests.server.kit import CHAIN, FILES, TOKEN, running
from tether.blobs.local import LocalBlobStore
from tether.client import ApiError, TetherClient
from tether.server import StreamSettings
from tether.server.auth import BearerAuth
from tether.server.session import Sessions, run_scope
from tether.store.base import RunInfo, Status, Store

AUTH = {"Authorization": f"Bearer {TOKEN}"}
SLOW = chain_input(n=40, width=2, delay=0.3)


async def wait_status(client: TetherClient, run_id: str, *statuses: str) -> dict[str, object]:
    async for event in client.events(run_id):
        if event.data.get("status") in statuses and not event.data.get("node_id"):
            return event.data
    raise AssertionError(f"run {run_id} ended without reaching {statuses}")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/runs"),
        ("POST", "/v1/runs"),
        ("GET", "/v1/runs/RUN"),
        ("GET", "/v1/runs/RUN/events"),
        ("POST", "/v1/runs/RUN/cancel"),
        ("POST", "/v1/runs/RUN/resume"),
        ("POST", "/v1/runs/RUN/fork"),
        ("GET", "/v1/runs/RUN/export"),
        ("POST", "/v1/runs/import"),
        ("GET", "/v1/blobs/" + "0" * 64 + "?run_id=RUN"),
        ("GET", "/runs/RUN"),
        ("GET", "/openapi.json"),
    ],
)
async def test_missing_or_wrong_token_gets_401_and_no_data(
    sqlite_store: Store, method: str, path: str
) -> None:
    async with running(sqlite_store) as (url, _), httpx.AsyncClient(base_url=url) as http:
        created = await http.post(
            "/v1/runs", headers=AUTH, json={"agent": CHAIN, "input": chain_input(2, 1, 0)}
        )
        run_id = created.json()["run_id"]
        path = path.replace("RUN", run_id)
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": f"Basic {TOKEN}"},
            {"Authorization": f"Bearer {TOKEN}x"},
        ):
            r = await http.request(method, path, headers=headers, json={"agent": CHAIN})
            assert r.status_code == 401, (headers, r.text)
            assert r.headers["www-authenticate"].startswith("Bearer")
            assert run_id not in r.text and r.json()["error"]["type"] == "unauthorized"
        # A cookie authorizes reads only, never a state change.
        cookie = {"Cookie": f"tether_token={TOKEN}"}
        r = await http.post(f"/v1/runs/{run_id}/cancel", headers=cookie)
        assert r.status_code == 401
        assert (await http.get("/healthz")).json() == {"ok": True}
        assert (await http.get("/readyz")).status_code == 200


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 422, "body"),
        (b"{}", 422, "agent: Field required"),
        (b'{"agent": ""}', 422, "agent: String should have at least 1 character"),
        (b'{"agent": "demo", "colour": 1}', 422, "colour: Extra inputs are not permitted"),
        (b'{"agent": "demo", "budget": {"max_nodes": -1}}', 422, "budget.max_nodes"),
        (b'{"agent": "demo", "budget": {"max_cost": "lots"}}', 422, "budget.max_cost"),
        (b'{"agent": "os:system"}', 422, "not served here"),
        (b"x" * (1 << 20 + 1), 413, "over"),
    ],
)
async def test_bad_start_requests_say_what_was_wrong(
    sqlite_store: Store, body: bytes, status: int, says: str
) -> None:
    async with running(sqlite_store) as (url, _), httpx.AsyncClient(base_url=url) as http:
        r = await http.post("/v1/runs", headers=AUTH, content=body)
        assert r.status_code == status, r.text
        assert says in r.json()["error"]["message"]
        assert (await http.get("/v1/runs", headers=AUTH)).json()["runs"] == []


@pytest.mark.parametrize(
    ("path", "headers", "status", "says"),
    [
        ("/v1/runs?status=bogus", {}, 400, "status must be one of"),
        ("/v1/runs?limit=0", {}, 400, "limit must be between 1 and 500"),
        ("/v1/runs?offset=x", {}, 400, "offset must be an integer"),
        ("/v1/runs/nope", {}, 404, "unknown run 'nope'"),
        ("/v1/runs/nope/events", {}, 404, "unknown run"),
        ("/v1/runs/RUN/events?after=x", {}, 400, "must be a seq"),
        ("/v1/runs/RUN/events", {"Last-Event-ID": "-7"}, 400, "must be a seq"),
        ("/v1/blobs/abc?run_id=RUN", {}, 400, "sha256"),
        ("/v1/blobs/" + "a" * 64, {}, 400, "?run_id="),
        ("/v1/blobs/" + "a" * 64 + "?run_id=RUN", {}, 404, "no record of run"),
    ],
)
async def test_bad_reads_say_what_was_wrong(
    sqlite_store: Store, tmp_path: Path, path: str, headers: dict[str, str], status: int, says: str
) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    async with (
        running(sqlite_store, blobs=blobs) as (url, _),
        TetherClient(url, TOKEN) as client,
        httpx.AsyncClient(base_url=url) as http,
    ):
        run_id = (await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"]
        r = await http.get(path.replace("RUN", run_id), headers={**AUTH, **headers})
        assert r.status_code == status, r.text
        assert says in r.json()["error"]["message"]


async def test_a_retried_start_with_the_same_key_returns_the_same_run(sqlite_store: Store) -> None:
    async with running(sqlite_store) as (url, _), TetherClient(url, TOKEN) as client:
        body = chain_input(3, 2, 0)
        first = await client.start(CHAIN, body, idempotency_key="order-42")
        again = await asyncio.gather(
            *(client.start(CHAIN, body, idempotency_key="order-42") for _ in range(5))
        )
        assert {a["run_id"] for a in again} == {first["run_id"]}
        listed = (await client.list())["runs"]
        assert [r["run_id"] for r in listed if r["parent_run_id"] is None] == [first["run_id"]]
        with pytest.raises(ApiError) as err:
            await client.start(CHAIN, {**body, "n": 4}, idempotency_key="order-42")
        assert err.value.status == 409 and "different request" in str(err.value)
        other = await client.start(CHAIN, body, idempotency_key="order-43")
        assert other["run_id"] != first["run_id"]


async def test_start_answers_at_once_then_get_tells_budget_counts(sqlite_store: Store) -> None:
    async with running(sqlite_store) as (url, _), TetherClient(url, TOKEN) as client:
        accepted = await client.start(CHAIN, chain_input(3, 2, 0.05), budget={"max_nodes": 100})
        run_id = accepted["run_id"]
        # Queued for a worker (here, the embedded one), which may have claimed it already.
        assert accepted["status"] in ("queued", "running")
        assert accepted["urls"]["events"] == f"/v1/runs/{run_id}/events"
        await wait_status(client, run_id, "succeeded")
        run = await client.get(run_id)
        assert run["status"] == "succeeded" and run["result"] == {"steps": 3}
        assert run["counts"]["completed"] == chain_nodes(3, 2) == len(run["nodes"])
        assert run["budget"]["limits"]["max_nodes"] == 100
        assert run["budget"]["used"]["nodes"] == chain_nodes(3, 2)
        assert run["timings"]["wall_ms"] > 0
        page = await client.list(status="succeeded", limit=1)
        assert [r["run_id"] for r in page["runs"]] == [run_id]


async def test_list_filters_orphaned_runs_apart_from_running_ones(sqlite_store: Store) -> None:
    # Rows only (no worker here would adopt them): one owner alive, one whose lease ran out.
    for run_id, lease_s in (("alive", 600.0), ("dead", -60.0)):
        info = RunInfo(run_id=run_id, agent=CHAIN, status=Status.RUNNING, owner="w")
        await sqlite_store.runs.create(info, b"first", lease_s=lease_s)
    async with running(sqlite_store, workers="none") as (url, _), TetherClient(url, TOKEN) as c:
        orphaned = (await c.list(status="orphaned"))["runs"]
        assert [(r["run_id"], r["state"]) for r in orphaned] == [("dead", "orphaned")]
        live = (await c.list(status="running"))["runs"]
        assert [(r["run_id"], r["state"]) for r in live] == [("alive", "running")]
        with pytest.raises(ApiError) as bad:
            await c.list(status="zombie")
        assert bad.value.status == 400 and "'orphaned'" in str(bad.value)


async def test_list_paginates(sqlite_store: Store) -> None:
    async with running(sqlite_store) as (url, _), TetherClient(url, TOKEN) as client:
        ids = {(await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"] for _ in range(5)}
        seen: list[str] = []
        page = await client.list(limit=2)
        while True:
            seen += [r["run_id"] for r in page["runs"]]
            if page["next"] is None:
                break
            offset = int(page["next"].split("offset=")[1].split("&")[0])
            page = await client.list(limit=2, offset=offset)
        assert len(seen) == 5 and set(seen) == ids


async def test_disconnecting_never_stops_a_run_but_cancel_does(sqlite_store: Store) -> None:
    async with running(sqlite_store) as (url, _), TetherClient(url, TOKEN) as client:
        run_id = (await client.start(CHAIN, SLOW))["run_id"]
        # Read a few records, then drop the connection mid-stream.
        seen = 0
        async for event in client.events(run_id):
            seen = event.seq or 0
            if seen >= 2:
                break
        # The run goes on without anyone watching.
        async for event in client.events(run_id, after=seen):
            if (event.seq or 0) >= seen + 3:
                break
        assert (await client.get(run_id))["status"] == "running"
        cancelled = await client.cancel(run_id)
        assert cancelled["status"] == "cancelled"
        records = [e.data async for e in client.events(run_id)]
        assert records[-1]["body"] == "run_finished" and records[-1]["status"] == "cancelled"
        assert [r["seq"] for r in records] == list(range(len(records)))
        run = await client.get(run_id)
        assert run["status"] == "cancelled" and run["reason"] == "cancelled by request"
        with pytest.raises(ApiError) as err:
            await client.cancel(run_id)
        assert err.value.status == 409
        with pytest.raises(ApiError) as err:
            await client.resume(run_id)
        assert err.value.status == 409


async def test_a_paused_run_resumes_with_a_larger_budget(sqlite_store: Store) -> None:
    async with running(sqlite_store) as (url, _), TetherClient(url, TOKEN) as client:
        run_id = (await client.start(CHAIN, chain_input(3, 1, 0), budget={"max_nodes": 2}))[
            "run_id"
        ]
        paused = await wait_status(client, run_id, "paused")
        assert paused["reason"] == "budget: node limit 2 reached"
        # Not raised: it would pause again at once, so it is refused, saying why.
        for same in (None, {"max_nodes": 2}):
            with pytest.raises(ApiError) as err:
                await client.resume(run_id, budget=same)
            assert (err.value.status, err.value.kind) == (409, "budget_spent")
            assert "node limit 2 reached" in str(err.value)
            assert "budget.max_nodes" in str(err.value)
        assert (await client.get(run_id))["status"] == "paused"
        await client.resume(run_id, budget={"max_nodes": 50})
        async for _ in client.events(run_id):
            pass
        run = await client.get(run_id)
        assert run["status"] == "succeeded"
        assert run["budget"]["limits"]["max_nodes"] == 50


async def test_resume_over_http_takes_plus_n_as_n_more_than_used(sqlite_store: Store) -> None:
    async with running(sqlite_store) as (url, _), TetherClient(url, TOKEN) as client:
        run_id = (await client.start(CHAIN, chain_input(4, 1, 0), budget={"max_nodes": 2}))[
            "run_id"
        ]
        await wait_status(client, run_id, "paused")
        for bad, says in (
            ("+x", "'+x': not a number"),
            ("3", "'3': a limit is a finite number >= 0 (0: none), or \"+N\""),
            (-1, "-1: a limit is"),
            ("+inf", "'+inf': a limit is"),
            ("+1e16", "'+1e16': at most 1e+15"),
        ):
            field = "max_tokens" if bad == "+1e16" else "max_nodes"
            with pytest.raises(ApiError) as err:
                await client.resume(run_id, budget={field: bad})
            assert (err.value.status, err.value.kind) == (422, "validation")
            assert f"budget.{field}: Value error, {says}" in str(err.value)
        assert (await client.get(run_id))["budget"]["limits"]["max_nodes"] == 2
        await client.resume(run_id, budget={"max_nodes": "+2", "max_cost": 1.5})
        await wait_status(client, run_id, "paused")
        run = await client.get(run_id)
        assert run["budget"]["limits"]["max_nodes"] == 4 == run["budget"]["used"]["nodes"]
        assert run["budget"]["limits"]["max_cost"] == 1.5
        assert run["reason"] == "budget: node limit 4 reached"


async def test_a_stream_ends_after_its_time_limit_with_a_retry_hint(sqlite_store: Store) -> None:
    streams = StreamSettings(max_duration_s=0.5, retry_ms=250)
    async with (
        running(sqlite_store, streams=streams) as (url, _),
        TetherClient(url, TOKEN) as client,
        httpx.AsyncClient(base_url=url, headers=AUTH) as http,
    ):
        run_id = (await client.start(CHAIN, SLOW))["run_id"]
        r = await http.get(f"/v1/runs/{run_id}/events")  # returns once the server ends it
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        messages = r.text.rstrip().split("\n\n")
        sent = [int(line[4:]) for m in messages for line in m.split("\n") if line[:4] == "id: "]
        assert sent, "the run recorded nothing within the stream's half second"
        # The last message tells the client to reconnect after the last record it was sent.
        assert messages[-1] == "\n".join(
            [
                "retry: 250",
                "event: reconnect",
                f'data: {{"run_id":"{run_id}","after":{sent[-1]}}}',
            ]
        )
        assert (await client.get(run_id))["status"] == "running"
        await client.cancel(run_id)


async def test_a_blob_a_record_points_to_is_served_with_its_media_type(
    sqlite_store: Store, tmp_path: Path
) -> None:
    blobs = LocalBlobStore(tmp_path / "blobs")
    async with (
        running(sqlite_store, blobs=blobs) as (url, _),
        TetherClient(url, TOKEN) as client,
        httpx.AsyncClient(base_url=url, headers=AUTH) as http,
    ):
        run_id = (await client.start(FILES, {"text": "hello, blob"}))["run_id"]
        records = [e.data async for e in client.events(run_id)]
        sha = records[-1]["result"]["sha256"]
        [written] = [r for r in records if r["body"] == "node_completed"]
        assert written["blobs"][0]["sha256"] == sha
        r = await http.get(f"/v1/blobs/{sha}", params={"run_id": run_id})
        assert r.status_code == 200 and r.content == b"hello, blob"
        assert r.headers["content-type"].startswith("text/plain")
        # Stored, but no record of that run points to it: refused.
        other = await blobs.put(b"not yours", "text/plain")
        r = await http.get(f"/v1/blobs/{other.sha256}", params={"run_id": run_id})
        assert r.status_code == 404


async def test_the_page_trades_a_token_for_a_session_cookie(sqlite_store: Store) -> None:
    async with (
        running(sqlite_store) as (url, _),
        TetherClient(url, TOKEN) as client,
        httpx.AsyncClient(base_url=url) as http,
    ):
        run_id = (await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"]
        r = await http.get(f"/runs/{run_id}", params={"token": TOKEN})
        assert r.status_code == 303 and r.headers["location"] == f"/runs/{run_id}"
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie
        assert f"Path=/runs/{run_id}" in cookie and TOKEN not in cookie
        session = cookie.split(";")[0]
        page = await http.get(f"/runs/{run_id}", headers={"Cookie": session})
        assert page.status_code == 200 and f'data-run-id="{run_id}"' in page.text
        assert "EventSource" in page.text
        assert (await http.get(f"/runs/{run_id}", params={"token": "nope"})).status_code == 401


def sse_ids(text: str) -> list[int]:
    return [int(line[4:]) for line in text.splitlines() if line.startswith("id: ")]


async def test_last_event_id_resumes_with_the_very_next_record(sqlite_store: Store) -> None:
    # Raw HTTP: the client and the page both drop duplicates, which would hide a server
    # that resumed at the record the client already had.
    async with (
        running(sqlite_store) as (url, _),
        TetherClient(url, TOKEN) as client,
        httpx.AsyncClient(base_url=url, headers=AUTH) as http,
    ):
        run_id = (await client.start(CHAIN, chain_input(3, 1, 0)))["run_id"]
        await wait_status(client, run_id, "succeeded")
        everything = sse_ids((await http.get(f"/v1/runs/{run_id}/events")).text)
        last = everything[-1]
        assert everything == list(range(last + 1))
        for k in range(last):
            r = await http.get(f"/v1/runs/{run_id}/events", headers={"Last-Event-ID": str(k)})
            assert sse_ids(r.text) == list(range(k + 1, last + 1)), k
        # Last-Event-ID (a reconnect) wins over the ?after= the stream was first opened with.
        r = await http.get(
            f"/v1/runs/{run_id}/events", params={"after": 0}, headers={"Last-Event-ID": "3"}
        )
        assert sse_ids(r.text)[0] == 4


async def test_the_page_checks_its_cookie_value_not_only_its_name(sqlite_store: Store) -> None:
    async with (
        running(sqlite_store) as (url, _),
        TetherClient(url, TOKEN) as client,
        httpx.AsyncClient(base_url=url) as http,
    ):
        run_id = (await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"]
        other = (await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"]
        await wait_status(client, run_id, "succeeded")
        r = await http.get(f"/runs/{run_id}", params={"token": TOKEN})
        name, _, good = r.headers["set-cookie"].split(";")[0].partition("=")
        assert name == "tether_page"
        version, scope, expires, mac = good.split(".")
        forged_mac = mac[:-1] + ("A" if mac[-1] != "A" else "B")
        session = Sessions.for_token(TOKEN)
        wrong = {
            "garbage": "nonsense",
            "the API token itself": TOKEN,
            "a forged mac": ".".join([version, scope, expires, forged_mac]),
            "a later expiry": ".".join([version, scope, str(int(expires) + 60), mac]),
            "another run's session": session.mint(run_scope(other)),
            "an expired session": session.mint(run_scope(run_id), now=time.time() - 7200),
            "a session minted with another token": Sessions.for_token("not-the-token").mint(
                run_scope(run_id)
            ),
        }
        for path in (f"/runs/{run_id}", f"/runs/{run_id}/events"):
            ok = await http.get(path, headers={"Cookie": f"tether_page={good}"})
            assert ok.status_code in (200, 204), path
            for what, value in wrong.items():
                r = await http.get(path, headers={"Cookie": f"tether_page={value}"})
                assert r.status_code == 401, (path, what)


async def test_auth_refusals_and_page_sessions_in_detail(sqlite_store: Store) -> None:
    async with (
        running(sqlite_store) as (url, _),
        TetherClient(url, TOKEN) as client,
        httpx.AsyncClient(base_url=url) as http,
    ):
        run_id = (await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"]
        # A refusal is JSON that says what to send.
        r = await http.get("/v1/runs")
        assert r.status_code == 401
        assert r.headers["content-type"] == "application/json"
        assert int(r.headers["content-length"]) == len(r.content)
        assert r.headers["www-authenticate"] == 'Bearer realm="tether"'
        assert r.json()["error"] == {
            "type": "unauthorized",
            "message": "missing or wrong bearer token: send Authorization: Bearer <token>",
        }
        # The scheme is case-insensitive and spaces before the token do not count.
        assert (
            await http.get("/v1/runs", headers={"Authorization": f"bearer  {TOKEN}"})
        ).is_success
        # The page opened with the header sets its session cookie for the stream.
        page = await http.get(f"/runs/{run_id}", headers=AUTH)
        assert page.status_code == 200 and page.headers["set-cookie"].startswith("tether_page=")
        cookie = {"Cookie": page.headers["set-cookie"].split(";")[0]}
        assert (await http.head(f"/runs/{run_id}", headers=cookie)).status_code == 200
        # A page token never changes state, nor does the page's own cookie.
        r = await http.post(f"/runs/{run_id}", params={"token": TOKEN})
        assert r.status_code == 401
        assert (await http.post(f"/runs/{run_id}", headers=cookie)).status_code == 401
        # Only a page path is a page: a session for a run id with a slash opens nothing.
        odd = Sessions.for_token(TOKEN).mint(run_scope("a/b"))
        assert (
            await http.get("/runs/a/b", headers={"Cookie": f"tether_page={odd}"})
        ).status_code == 401
        empty = Sessions.for_token(TOKEN).mint(run_scope(""))
        assert (
            await http.get("/runs/", headers={"Cookie": f"tether_page={empty}"})
        ).status_code == 401


def test_an_empty_api_token_is_refused() -> None:
    with pytest.raises(ValueError, match="the API token must be at least 16 characters"):
        BearerAuth(lambda scope, receive, send: None, "", Sessions.for_token("x"))  # type: ignore[arg-type]


async def test_an_input_that_does_not_fit_the_agent_gets_422_and_records_nothing(
    sqlite_store: Store,
) -> None:
    typed = "tests.test_inputs:typed"  # declares its input: {"question": str, "depth": int}
    async with (
        running(sqlite_store, agents=(typed,)) as (url, _),
        httpx.AsyncClient(base_url=url, headers=AUTH) as http,
    ):
        bad = {"agent": typed, "input": {"question": "q", "depth": "deep"}}
        response = await http.post("/v1/runs", json=bad)
        assert response.status_code == 422
        assert response.json()["error"]["type"] == "bad_input"
        assert "at depth" in response.json()["error"]["message"]
        response = await http.post("/v1/runs", json={"agent": typed})  # no input at all
        assert response.status_code == 422
        assert response.json()["error"]["type"] == "bad_input"
    assert await sqlite_store.runs.list() == []
