"""Issue 20 against a real `tether serve` process: blobs as downloads, bounded bodies and
connections, start caps, unforgeable streams, 4xx for client mistakes, security headers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import select
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.conftest import fresh_db_name, pg_admin, pg_url
from tests.server.agents import chain_input
from tests.server.kit import (
    CHAIN,
    FILES,
    FORGER,
    OUTPUT,
    TOKEN,
    ServerProcess,
    running,
    start_server,
)
from tether.client import RunEvent, TetherClient
from tether.store.base import Store

AUTH = {"Authorization": f"Bearer {TOKEN}"}
EXTRA = ("--agent", FILES, "--agent", FORGER)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path, f"sqlite:///{tmp_path / 'tether.db'}", *EXTRA)
    yield proc
    assert proc.stop() == 0


def addr(url: str) -> tuple[str, int]:
    host, _, port = url.removeprefix("http://").partition(":")
    return host, int(port)


async def finished_run(url: str, agent: str, input: Any) -> tuple[str, list[RunEvent]]:
    async with TetherClient(url, TOKEN) as client:
        run_id = (await client.start(agent, input))["run_id"]
        async with asyncio.timeout(60):
            return run_id, [e async for e in client.events(run_id)]


# -- blobs are downloads ------------------------------------------------------------


@pytest.mark.parametrize(
    ("media_type", "disposition"),
    [
        ("text/html", "attachment"),
        ("image/svg+xml", "attachment"),
        ("application/xhtml+xml", "attachment"),
        ("image/png", "inline"),
        ("image/webp", "inline"),
    ],
)
async def test_a_blob_is_a_sandboxed_download_unless_a_raster_image(
    server: ServerProcess, media_type: str, disposition: str
) -> None:
    html = "<script>document.title='XSS-RAN'</script>"
    run_id, records = await finished_run(
        server.url, FILES, {"text": html, "media_type": media_type}
    )
    sha = records[-1].data["result"]["sha256"]
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as http:
        r = await http.get(f"/v1/blobs/{sha}", params={"run_id": run_id})
    assert r.status_code == 200 and r.text == html
    assert r.headers["content-disposition"].startswith(disposition)
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["content-security-policy"] == "sandbox; default-src 'none'"


async def test_blobs_and_the_api_refuse_the_page_cookie(server: ServerProcess) -> None:
    run_id, records = await finished_run(server.url, FILES, {"text": "secret"})
    sha = records[-1].data["result"]["sha256"]
    async with httpx.AsyncClient(base_url=server.url) as http:
        r = await http.get(f"/runs/{run_id}", params={"token": TOKEN})
        assert r.status_code == 303
        set_cookie = r.headers["set-cookie"]
        assert TOKEN not in set_cookie  # the API token never sits in a cookie
        cookie = {"Cookie": set_cookie.split(";")[0]}
        assert (await http.get(f"/runs/{run_id}", headers=cookie)).status_code == 200
        for path in (
            f"/v1/blobs/{sha}?run_id={run_id}",
            f"/v1/runs/{run_id}",
            "/v1/runs?limit=500",
            f"/v1/runs/{run_id}/events",
        ):
            assert (await http.get(path, headers=cookie)).status_code == 401, path
        # Nor the API token itself as a cookie, the way main used to accept it.
        legacy = {"Cookie": f"tether_token={TOKEN}"}
        assert (await http.get("/v1/runs", headers=legacy)).status_code == 401


async def test_a_page_session_reads_its_own_run_only(server: ServerProcess) -> None:
    async with TetherClient(server.url, TOKEN) as client:
        mine = (await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"]
        other = (await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"]
    async with httpx.AsyncClient(base_url=server.url) as http:
        r = await http.get(f"/runs/{mine}", params={"token": TOKEN})
        assert f"Path=/runs/{mine}" in r.headers["set-cookie"]
        assert "HttpOnly" in r.headers["set-cookie"] and "Max-Age=" in r.headers["set-cookie"]
        cookie = {"Cookie": r.headers["set-cookie"].split(";")[0]}
        assert (await http.get(f"/runs/{other}", headers=cookie)).status_code == 401
        assert (await http.get(f"/runs/{other}/events", headers=cookie)).status_code == 401
        async with http.stream("GET", f"/runs/{mine}/events", headers=cookie) as stream:
            assert stream.status_code == 200
        forged = {"Cookie": cookie["Cookie"][:-3] + "AAA"}
        assert (await http.get(f"/runs/{mine}", headers=forged)).status_code == 401


# -- bounded bodies -----------------------------------------------------------------


def _request_head(url: str, extra: str) -> bytes:
    host, port = addr(url)
    return (
        f"POST /v1/runs HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Type: application/json\r\n{extra}\r\n"
    ).encode()


def _status_of(raw: bytes) -> int:
    return int(raw.split(b" ", 2)[1])


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_a_declared_length_over_the_limit_is_refused_before_the_body(
    server: ServerProcess,
) -> None:
    with socket.create_connection(addr(server.url), timeout=20) as sock:
        sock.sendall(_request_head(server.url, f"Content-Length: {300 << 20}\r\n"))
        # Not a byte of the body sent: the answer comes from the header alone.
        answer = sock.recv(65536)
    assert _status_of(answer) == 413, answer[:200]


def test_a_chunked_body_is_counted_while_streaming(server: ServerProcess) -> None:
    total, chunk = 64 << 20, b"x" * (64 << 10)
    frame = b"%x\r\n%s\r\n" % (len(chunk), chunk)
    rss_before = _rss_kb(server.proc.pid)
    sent = 0  # body bytes handed to the kernel
    answer = b""
    with socket.create_connection(addr(server.url), timeout=20) as sock:
        sock.sendall(_request_head(server.url, "Transfer-Encoding: chunked\r\n"))
        pending = b""
        try:
            while not answer and sent < total:
                if not pending:
                    pending = frame
                readable, writable, _ = select.select([sock], [sock], [], 20)
                if readable:
                    answer = sock.recv(65536)  # the server answered mid-body
                    break
                if writable:
                    n = sock.send(pending)
                    pending = pending[n:]
                    sent += n
        except (ConnectionResetError, BrokenPipeError):
            pass  # the server answered and closed while we were still sending
        if not answer:  # the whole body went out: end it, as a client would
            sock.setblocking(True)
            sock.sendall(b"0\r\n\r\n")
            answer = sock.recv(65536)
    growth_mb = (_rss_kb(server.proc.pid) - rss_before) / 1024
    print(f"chunked body: refused after {sent >> 20} MiB sent; server RSS +{growth_mb:.1f} MB")
    assert _status_of(answer) == 413, answer[:200]
    assert sent < total // 4  # refused early, not after reading 64 MiB


# -- client mistakes are 4xx --------------------------------------------------------


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("body", "headers", "kind"),
    [
        ('{"agent": "demo", "input": ' + _deep(3000) + "}", {}, "too_deep"),
        ('{"agent": "demo", "input": ' + _deep(900) + "}", {"Idempotency-Key": "k"}, "too_deep"),
        ('{"agent": "demo", "input": NaN}', {}, "non_finite_number"),
        ('{"agent": "demo", "input": -Infinity}', {}, "non_finite_number"),
        ('{"agent": "demo", "input": 1e999}', {}, "non_finite_number"),
        ('{"agent": "demo", "input": "\\ud800"}', {}, "invalid_unicode"),
        ('{"agent": "demo", "input": {"\\udfff": 1}}', {}, "invalid_unicode"),
    ],
    ids=["depth-3000", "depth-900-with-key", "nan", "-inf", "1e999", "surrogate", "surrogate-key"],
)
async def test_hostile_json_gets_a_400_that_says_why(
    server: ServerProcess, body: str, headers: dict[str, str], kind: str
) -> None:
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as http:
        r = await http.post("/v1/runs", content=body, headers=headers)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["type"] == kind
        # Nothing was started, and the server still answers.
        assert (await http.get("/v1/runs")).json()["runs"] == []


async def test_a_moved_blob_root_is_served_or_refused_without_paths(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tether.db'}"
    server = start_server(tmp_path, db, *EXTRA)
    try:
        run_id, records = await finished_run(server.url, FILES, {"text": "moved"})
    finally:
        assert server.stop() == 0
    sha = records[-1].data["result"]["sha256"]
    (tmp_path / "blobs").rename(tmp_path / "elsewhere")
    server = start_server(tmp_path, db, "--agent", FILES)  # --blobs <home>/blobs: now empty
    try:
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as http:
            missing = await http.get(f"/v1/blobs/{sha}", params={"run_id": run_id})
            view = await http.get(f"/v1/runs/{run_id}", params={"outputs": "1"})
    finally:
        assert server.stop() == 0
    assert missing.status_code == 404, missing.text
    assert str(tmp_path) not in missing.text and "/v1/blobs/" in missing.text
    assert view.status_code == 200 and str(tmp_path) not in view.text


async def test_run_views_show_blob_routes_and_opaque_owners(server: ServerProcess) -> None:
    run_id, records = await finished_run(server.url, FILES, {"text": "where am I"})
    sha = records[-1].data["result"]["sha256"]
    [written] = [r.data for r in records if r.data["body"] == "node_completed"]
    assert written["blobs"][0]["url"] == f"/v1/blobs/{sha}?run_id={run_id}"
    async with TetherClient(server.url, TOKEN) as client:
        slow = (await client.start(CHAIN, chain_input(30, 1, 0.3)))["run_id"]
        async with asyncio.timeout(30):
            async for e in client.events(slow):  # running: a worker owns it now
                if e.data["body"] == "node_completed":
                    break
        row = next(r for r in (await client.list())["runs"] if r["run_id"] == slow)
        view = await client.get(run_id)
        await client.cancel(slow)
    host_pid = f"{socket.gethostname()}:{server.proc.pid}"
    assert row["owner"] and row["owner"].startswith("owner-") and host_pid not in json.dumps(row)
    assert "file://" not in json.dumps(view) and "file://" not in json.dumps(written)


async def test_readyz_says_only_whether(server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.url) as http:
        r = await http.get("/readyz")
    assert r.status_code == 200 and r.json() == {"ok": True, "status": "ready"}


# -- caps on starts -----------------------------------------------------------------


async def test_the_queue_cap_answers_429_with_retry_after(tmp_path: Path) -> None:
    # No workers: every start stays queued.
    server = start_server(
        tmp_path, f"sqlite:///{tmp_path / 'tether.db'}", "--workers", "external",
        "--max-queued", "3",
    )  # fmt: skip
    try:
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as http:
            body = {"agent": CHAIN, "input": chain_input(1, 1, 0)}
            codes = [(await http.post("/v1/runs", json=body)).status_code for _ in range(3)]
            refused = await http.post("/v1/runs", json=body)
            runs = (await http.get("/v1/runs")).json()["runs"]
    finally:
        assert server.stop() == 0
    assert codes == [202, 202, 202]
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"]["type"] == "too_many_requests"
    assert len(runs) == 3


async def test_starts_per_second_per_token_are_capped(tmp_path: Path) -> None:
    server = start_server(
        tmp_path, f"sqlite:///{tmp_path / 'tether.db'}", "--workers", "external",
        "--starts-per-second", "0.01", "--start-burst", "2",
    )  # fmt: skip
    try:
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as http:
            body = {"agent": CHAIN, "input": chain_input(1, 1, 0)}
            codes = [(await http.post("/v1/runs", json=body)).status_code for _ in range(2)]
            refused = await http.post("/v1/runs", json=body)
    finally:
        assert server.stop() == 0
    assert codes == [202, 202]
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1


# -- streams ------------------------------------------------------------------------


async def test_a_finished_stream_answers_204_past_its_last_seq(server: ServerProcess) -> None:
    run_id, records = await finished_run(server.url, CHAIN, chain_input(1, 1, 0))
    last = records[-1].seq
    assert last is not None and records[-1].data["body"] == "run_finished"
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as http:
        done = await http.get(f"/v1/runs/{run_id}/events", headers={"Last-Event-ID": str(last)})
        assert done.status_code == 204 and done.content == b""
        again = await http.get(f"/v1/runs/{run_id}/events", params={"after": last - 1})
        assert again.status_code == 200 and f"id: {last}" in again.text
        unknown = await http.get("/v1/runs/no-such-run/events")
        assert unknown.status_code == 404
    async with TetherClient(server.url, TOKEN) as client:  # the client stops on the 204
        assert [e async for e in client.events(run_id, after=last)] == []


async def test_forged_live_events_are_never_records(server: ServerProcess, tmp_path: Path) -> None:
    until = tmp_path / "seen-one"
    records: list[RunEvent] = []
    live: list[RunEvent] = []
    async with TetherClient(server.url, TOKEN) as client:
        run_id = (await client.start(FORGER, {"until": str(until)}))["run_id"]
        async with asyncio.timeout(60):
            async for event in client.events(run_id, tokens=True):
                if event.kind == "record":
                    records.append(event)
                else:
                    live.append(event)
                    until.touch()  # seen a forgery: the forger may fail now
    assert live, "the forger's events never arrived"
    assert {e.kind for e in live} == {"live"}
    for e in live:
        assert e.seq is None and "seq" not in e.data and "id" not in e.data
        assert e.data["run_id"] == run_id and e.data["node_id"] != "not-me"
    assert [e.seq for e in records] == list(range(len(records)))
    assert records[-1].data["body"] == "run_finished" and records[-1].data["status"] == "failed"


# -- connections --------------------------------------------------------------------


def _low_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


async def test_idle_and_slow_header_sockets_cannot_starve_healthz(tmp_path: Path) -> None:
    server = start_server(
        tmp_path, f"sqlite:///{tmp_path / 'tether.db'}", "--header-timeout", "2",
        preexec_fn=_low_fd_limit,
    )  # fmt: skip
    socks: list[socket.socket] = []
    try:
        host, port = addr(server.url)
        for _i in range(300):  # more than the server has descriptors for
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex((host, port))
            socks.append(s)
        for s in socks[::2]:  # half of them trickle a request's first bytes, then stall
            with contextlib.suppress(OSError):
                s.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        ok = 0
        async with (
            asyncio.timeout(25),
            httpx.AsyncClient(base_url=server.url, timeout=2) as http,
        ):
            while not ok:
                try:
                    ok = (await http.get("/healthz")).status_code == 200
                except httpx.HTTPError:
                    await asyncio.sleep(0.2)  # probing a server we are flooding: no event
        lines = list(OUTPUT.get(server.proc.pid, []))
    finally:
        for s in socks:
            s.close()
        assert server.stop() == 0
    assert ok
    # Failed accepts are reported, not a traceback per retry.
    assert not [line for line in lines if "Traceback" in line], "".join(lines[:40])
    assert len([line for line in lines if "accept" in line]) <= 5


def test_serve_raises_its_open_file_limit_to_the_hard_limit(tmp_path: Path) -> None:
    def soft_256() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 4096))

    server = start_server(tmp_path, f"sqlite:///{tmp_path / 'tether.db'}", preexec_fn=soft_256)
    try:
        limits = Path(f"/proc/{server.proc.pid}/limits").read_text()
    finally:
        assert server.stop() == 0
    [line] = [line for line in limits.splitlines() if line.startswith("Max open files")]
    assert line.split()[3:5] == ["4096", "4096"], line


async def test_the_concurrency_limit_answers_503_beyond_it(tmp_path: Path) -> None:
    server = start_server(
        tmp_path, f"sqlite:///{tmp_path / 'tether.db'}", "--max-connections", "3",
    )  # fmt: skip
    try:
        async with TetherClient(server.url, TOKEN) as client:
            run_id = (await client.start(CHAIN, chain_input(30, 1, 0.3)))["run_id"]
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as http:
            async with (
                http.stream("GET", f"/v1/runs/{run_id}/events") as a,
                http.stream("GET", f"/v1/runs/{run_id}/events") as b,
                http.stream("GET", f"/v1/runs/{run_id}/events") as c,
            ):
                assert {a.status_code, b.status_code, c.status_code} == {200}
                async with httpx.AsyncClient(base_url=server.url) as other:
                    assert (await other.get("/healthz")).status_code == 503
            await http.post(f"/v1/runs/{run_id}/cancel")
    finally:
        assert server.stop() == 0


# -- headers and the page template ----------------------------------------------------


async def test_security_headers_on_every_response(server: ServerProcess) -> None:
    async with TetherClient(server.url, TOKEN) as client:
        run_id = (await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"]
    async with httpx.AsyncClient(base_url=server.url) as http:
        api = await http.get("/v1/runs", headers=AUTH)
        denied = await http.get("/v1/runs")
        health = await http.get("/healthz")
        page = await http.get(f"/runs/{run_id}", headers=AUTH)
    for r in (api, denied, health, page):
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "no-referrer"
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
    assert api.headers["cache-control"] == "no-store"
    csp = page.headers["content-security-policy"]
    assert "script-src 'sha256-" in csp and "'unsafe-inline'" not in csp
    assert "connect-src 'self'" in csp and "default-src 'none'" in csp


async def test_a_run_id_that_looks_like_a_placeholder_stays_text(server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as http:
        r = await http.get("/runs/%7B%7Bjs%7D%7D")
    assert r.status_code == 404 and "no such run" in r.text
    assert "EventSource" not in r.text and "{{js}}" in r.text


async def test_the_page_template_is_filled_in_one_pass(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = '{{js}}"><img src=x onerror=alert(1)>{{css}}'
    # Run ids are checked at the door now; a run recorded before that (or in a store
    # written by other code) may still hold any id, and the page must escape it.
    monkeypatch.setattr("tether.engine.runtime.check_run_id", lambda run_id: run_id)
    async with (
        running(sqlite_store) as (url, server_),
        httpx.AsyncClient(base_url=url, headers=AUTH) as http,
    ):
        await server_.launcher.start(CHAIN, chain_input(1, 1, 0), run_id=run_id, budget=None)
        r = await http.get("/runs/" + quote(run_id, safe=""))
    assert r.status_code == 200
    assert r.text.count("const RUN_ID") == 1  # the script once, where the template put it
    assert "<img" not in r.text and r.text.count("{{js}}") == 2  # title and attribute
    assert 'data-run-id="{{js}}&quot;&gt;&lt;img src=x onerror=alert(1)&gt;{{css}}"' in r.text
    assert f"Path=/runs/{quote(run_id, safe='')}" in r.headers["set-cookie"]


async def test_readyz_names_no_host_or_database_when_the_store_is_gone(
    tmp_path: Path, pg_template: str
) -> None:
    name = fresh_db_name("readyz")
    await pg_admin(f"CREATE DATABASE {name} TEMPLATE {pg_template}")
    server = start_server(tmp_path, pg_url(name), "--workers", "external")
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            assert (await http.get("/readyz")).status_code == 200
            await pg_admin(f"DROP DATABASE {name} WITH (FORCE)")  # the store goes away
            r = await http.get("/readyz")
    finally:
        server.stop()
        await pg_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    assert r.status_code == 503
    assert r.json() == {"ok": False, "status": "not ready"}
    assert name not in r.text and "5432" not in r.text and "127.0.0.1" not in r.text
