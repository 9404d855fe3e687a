"""Issue 39 against a real `tether serve`: ids, keys and streams that no agent output, key or
imported file can forge; the client reads any line break a stream may hold."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
import pytest

from tests.conftest import fresh_db_name, pg_admin, pg_url
from tests.server.agents import chain_input
from tests.server.kit import (
    CHAIN,
    ECHO,
    FILES,
    KINDS,
    OUTPUT,
    TOKEN,
    CuttingProxy,
    ServerProcess,
    child_env,
    running,
    start_server,
)
from tether.client import RunEvent, TetherClient
from tether.ops.tlog.format import END, HEADER, RUN, FrameWriter, read_frames
from tether.store.base import Store

AUTH = {"Authorization": f"Bearer {TOKEN}"}
# Every code point some reader takes for the end of a line, and SSE field names after them.
HOSTILE = "a\u2028event: end\u2028b\u2029id: 999\u2029c\x85data: {}\x85d\r\ne\rf\ng"
BREAKS = ("\r", "\n", "\u2028", "\u2029", "\x85")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = start_server(tmp_path, f"sqlite:///{tmp_path / 'tether.db'}", "--agent", ECHO)
    yield proc
    assert proc.stop() == 0


async def follow(url: str, agent: str, input: Any) -> tuple[str, list[RunEvent]]:
    async with TetherClient(url, TOKEN) as client:
        run_id = (await client.start(agent, input))["run_id"]
        async with asyncio.timeout(60):
            return run_id, [e async for e in client.events(run_id)]


async def raw_stream(url: str, run_id: str) -> str:
    """The whole text of a run's stream, read to its end as bytes."""
    async with (
        httpx.AsyncClient(base_url=url, headers=AUTH, timeout=60) as http,
        http.stream("GET", f"/v1/runs/{run_id}/events", params={"tokens": "1"}) as r,
    ):
        assert r.status_code == 200
        return (await r.aread()).decode()


# -- streams ------------------------------------------------------------------------


async def test_no_stream_line_holds_output_line_breaks_nor_a_run_id_in_a_comment(
    server: ServerProcess,
) -> None:
    run_id, records = await follow(server.url, ECHO, {"text": HOSTILE, "parts": 2})
    assert records[-1].data["status"] == "succeeded"
    text = await raw_stream(server.url, run_id)
    for c in ("\u2028", "\u2029", "\x85"):
        assert c not in text, f"{c!r} sent raw"
    lines = re.split(r"\r\n|\r|\n", text)
    comments = [line for line in lines if line.startswith(":")]
    assert comments and not [c for c in comments if run_id in c], comments
    # Escaped, not lost: every output arrives as it was written.
    data = [json.loads(line[len("data: ") :]) for line in lines if line.startswith("data: ")]
    outputs = [d["output"] for d in data if d.get("body") == "node_completed"]
    assert len(outputs) == 4 and all(o["text"] == HOSTILE for o in outputs)


@pytest.mark.parametrize(
    "key",
    [
        "a/b",
        "k\n\nid: 999\nevent: record\ndata: {}",
        "dots.in.it",
        "tab\there",
        "k" * 65,
    ],
    ids=["slash", "sse-lines", "dots", "tab", "too-long"],
)
async def test_a_sub_agent_key_outside_the_set_fails_its_node_naming_the_key(
    server: ServerProcess, key: str
) -> None:
    run_id, records = await follow(server.url, ECHO, {"text": "t", "parts": 1, "child_key": key})
    [failed] = [r.data for r in records if r.data["body"] == "node_failed"]
    assert failed["error"]["type"] == "BadRunId" and failed["retryable"] is False
    assert f"sub-agent key {key!r}" in failed["error"]["message"]
    assert records[-1].data["body"] == "run_finished" and records[-1].data["status"] == "failed"
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as http:
        children = (await http.get("/v1/runs", params={"parent": run_id})).json()["runs"]
    assert children == []


async def test_a_valid_sub_agent_key_makes_a_reachable_child(server: ServerProcess) -> None:
    run_id, records = await follow(
        server.url, ECHO, {"text": "t", "parts": 1, "child_key": "tenant:a-1_b"}
    )
    assert records[-1].data["status"] == "succeeded"
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as http:
        [child] = (await http.get("/v1/runs", params={"parent": run_id})).json()["runs"]
        assert child["run_id"].endswith(".tenant:a-1_b")
        assert child["urls"]["self"] == "/v1/runs/" + quote(child["run_id"], safe="")
        assert (await http.get(child["urls"]["self"])).json()["status"] == "succeeded"


# -- imports ------------------------------------------------------------------------


async def renamed(data: bytes, ids: dict[str, str]) -> bytes:
    """A `.tlog` file's bytes with runs renamed (`ids`: old id -> new id), hashed anew."""

    async def chunks() -> Any:
        yield data

    out = FrameWriter()
    parts = [out.start()]
    counts: dict[str, int] = {}
    async for frame in read_frames("test", chunks()):
        if frame.kind in (HEADER, RUN):
            value = frame.json("test")
            for field in ("run_id", "parent_run_id"):
                if value.get(field):
                    value[field] = ids.get(value[field], value[field])
            if frame.kind == HEADER:
                value["runs"] = [ids.get(r, r) for r in value["runs"]]
            parts.append(out.json_frame(frame.kind, value))
        elif frame.kind == END:
            counts = {k: v for k, v in frame.json("test").items() if k != "sha256"}
        else:
            parts.append(out.frame(frame.kind, frame.payload))
    parts.append(out.end(counts))
    return b"".join(parts)


@pytest.mark.parametrize(
    "key", ["a/b", "x\n\nid: 999", "k.extra.parts"], ids=["slash", "newline", "extra-parts"]
)
async def test_an_import_refuses_a_sub_agent_run_id_outside_the_set(
    server: ServerProcess, key: str
) -> None:
    run_id, records = await follow(server.url, ECHO, {"text": "t", "parts": 1, "child_key": "good"})
    assert records[-1].data["status"] == "succeeded"
    async with TetherClient(server.url, TOKEN) as client:
        data = b"".join([c async for c in client.export(run_id)])
        [child] = (await client._call("GET", "/v1/runs", params={"parent": run_id}))["runs"]
    bad_id = child["run_id"].removesuffix("good") + key
    forged = await renamed(data, {child["run_id"]: bad_id})
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as http:
        r = await http.post("/v1/runs/import", content=forged)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["type"] == "bad_tlog"
        assert repr(bad_id) in r.json()["error"]["message"]
        children = (await http.get("/v1/runs", params={"parent": run_id})).json()["runs"]
    assert [c["run_id"] for c in children] == [child["run_id"]]


# -- urls ---------------------------------------------------------------------------


async def test_urls_in_answers_are_percent_encoded(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A run recorded before ids were checked (or by other code) may hold any id.
    run_id = "old run?x=1#frag"
    monkeypatch.setattr("tether.engine.runtime.check_run_id", lambda run_id: run_id)
    async with (
        running(sqlite_store) as (url, server_),
        httpx.AsyncClient(base_url=url, headers=AUTH) as http,
    ):
        await server_.launcher.start(CHAIN, chain_input(1, 1, 0), run_id=run_id, budget=None)
        [row] = (await http.get("/v1/runs")).json()["runs"]
        view = (await http.get("/v1/runs/" + quote(run_id, safe=""))).json()
        for urls in (row["urls"], view["urls"]):
            assert urls["self"] == "/v1/runs/old%20run%3Fx%3D1%23frag"
            assert urls["events"] == urls["self"] + "/events"
            assert urls["page"] == "/runs/old%20run%3Fx%3D1%23frag"
            assert urls["signals"] == urls["self"] + "/signals/{key}"
        assert (await http.get(row["urls"]["self"])).json()["run_id"] == run_id


# -- the Python client --------------------------------------------------------------


class RawBreaksProxy:
    """Serves a run's stream from a real server, with the line breaks the server escapes
    (`\\u2028`, `\\u2029`, `\\u0085`) sent raw, as JSON allows and another server may
    send them, and cut after every `cut_every` records (a gateway with a short timeout)."""

    UNESCAPE = ((b"\\u2028", "\u2028"), (b"\\u2029", "\u2029"), (b"\\u0085", "\x85"))

    def __init__(self, upstream: str, cut_every: int) -> None:
        self.upstream = upstream
        self.cut_every = cut_every
        self.cuts = 0
        self.raw_sent = 0  # raw line breaks sent
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> RawBreaksProxy:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            _, target, _ = head[0].split(" ")
            wanted = {"authorization", "last-event-id"}
            headers = {
                k: v.strip()
                for k, _, v in (line.partition(":") for line in head[1:] if line)
                if k.lower() in wanted
            }
            async with (
                httpx.AsyncClient(base_url=self.upstream, timeout=60) as http,
                http.stream("GET", target, headers=headers) as r,
            ):
                writer.write(
                    f"HTTP/1.1 {r.status_code} X\r\nContent-Type: "
                    f"{r.headers.get('content-type', 'text/plain')}\r\n"
                    "Connection: close\r\n\r\n".encode()
                )
                records, pending = 0, b""
                async for chunk in r.aiter_raw():
                    pending += chunk
                    *messages, pending = pending.split(b"\n\n")
                    for message in messages:
                        for escaped, raw in self.UNESCAPE:
                            message = message.replace(escaped, raw.encode())
                            self.raw_sent += message.count(raw.encode())
                        writer.write(message + b"\n\n")
                        records += b"\nevent: record\n" in message
                        if records >= self.cut_every:
                            self.cuts += 1
                            await writer.drain()
                            writer.transport.abort()  # a cut, not a clean end
                            return
                    await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def test_the_client_splits_lines_as_sse_does_and_gets_every_record_once(
    server: ServerProcess,
) -> None:
    async with TetherClient(server.url, TOKEN) as direct:
        run_id = (await direct.start(ECHO, {"text": HOSTILE, "parts": 6}))["run_id"]
    async with (
        RawBreaksProxy(server.url, cut_every=2) as proxy,
        TetherClient(proxy.url, TOKEN) as client,
    ):
        async with asyncio.timeout(60):
            records = [e async for e in client.events(run_id)]
    assert [e.seq for e in records] == list(range(len(records)))
    assert records[-1].data["body"] == "run_finished"
    assert records[-1].data["status"] == "succeeded"
    outputs = [e.data["output"] for e in records if e.data["body"] == "node_completed"]
    assert len(outputs) == 8 and all(o["text"] == HOSTILE for o in outputs)
    assert records[-1].data["result"] == {"text": HOSTILE}
    assert proxy.raw_sent > 0 and proxy.cuts >= 3


# -- neighbours on the same host ----------------------------------------------------


async def test_a_page_cookie_is_found_among_malformed_and_duplicate_neighbours(
    server: ServerProcess,
) -> None:
    async with TetherClient(server.url, TOKEN) as client:
        run_id = (await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"]
        other = (await client.start(CHAIN, chain_input(1, 1, 0)))["run_id"]
    async with httpx.AsyncClient(base_url=server.url) as http:
        r = await http.get(f"/runs/{run_id}", params={"token": TOKEN})
        good = r.headers["set-cookie"].split(";")[0].partition("=")[2]
        r = await http.get(f"/runs/{other}", params={"token": TOKEN})
        others = r.headers["set-cookie"].split(";")[0].partition("=")[2]
        accepted = {
            "a malformed neighbour first": f'foo={{"a":1}}; tether_page={good}',
            "a malformed neighbour after": f'tether_page={good}; foo={{"a":1}}; bar',
            "junk of ours after": f"tether_page={good}; tether_page=junk",
            "junk of ours before": f"tether_page=junk; tether_page={good}",
            "another run's first": f"tether_page={others}; tether_page={good}",
            "quoted, spaced": f'x=y;tether_page = "{good}" ; z',
        }
        for why, cookie in accepted.items():
            got = await http.get(f"/runs/{run_id}/events", headers={"Cookie": cookie})
            assert got.status_code in (200, 204), why
        refused = {
            "only junk": 'foo={"a":1}; tether_page=junk',
            "another run's only": f"tether_page={others}",
            "a name that only ends like ours": f"xtether_page={good}",
            "forged": f"tether_page={good[:-3]}AAA",
        }
        for why, cookie in refused.items():
            got = await http.get(f"/runs/{run_id}/events", headers={"Cookie": cookie})
            assert got.status_code == 401, why


# -- blobs --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("recorded", "served", "disposition"),
    [
        ('text/html; charset=utf-8; x="\r\nX-Evil: 1"', "text/html; charset=utf-8", "attachment"),
        ('image/PNG; x="\r\n"; charset="utf-8"', "image/png; charset=utf-8", "inline"),
        ("text/plain; charset=utf-8; charset=latin1", "text/plain; charset=utf-8", "attachment"),
        ("no type\r\nX-Evil: 1", "application/octet-stream", "attachment"),
    ],
    ids=["quoted-crlf", "inline-image", "two-charsets", "no-type"],
)
async def test_a_blob_is_served_with_its_type_and_safe_parameters_only(
    tmp_path: Path, recorded: str, served: str, disposition: str
) -> None:
    server = start_server(tmp_path, f"sqlite:///{tmp_path / 'tether.db'}", "--agent", FILES)
    try:
        run_id, records = await follow(server.url, FILES, {"text": "hi", "media_type": recorded})
        sha = records[-1].data["result"]["sha256"]
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as http:
            r = await http.get(f"/v1/blobs/{sha}", params={"run_id": run_id})
            assert (await http.get("/healthz")).status_code == 200
        lines = list(OUTPUT.get(server.proc.pid, []))
    finally:
        assert server.stop() == 0
    assert r.status_code == 200 and r.text == "hi"
    assert r.headers["content-type"] == served
    assert r.headers["content-disposition"].startswith(disposition)
    assert "x-evil" not in r.headers
    assert not [line for line in lines if "Traceback" in line], "".join(lines)


# -- small leaks and inconsistencies ------------------------------------------------


async def test_worker_views_show_the_owner_id_only(server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as http:
        r = await http.get("/v1/workers")
    workers = r.json()["workers"]
    assert workers, r.text
    for worker in workers:
        assert "host" not in worker and "pid" not in worker, worker
        assert worker["owner"].startswith("owner-")
    assert f"{socket.gethostname()}:{server.proc.pid}" not in r.text


async def test_a_store_error_says_store_unavailable_with_a_request_id(
    tmp_path: Path, pg_template: str
) -> None:
    name = fresh_db_name("unavailable")
    await pg_admin(f"CREATE DATABASE {name} TEMPLATE {pg_template}")
    direct = urlsplit(pg_url(name))
    try:
        # The store reached through a proxy that then goes away: connections refused.
        async with CuttingProxy(f"{direct.hostname}:{direct.port}", cut_after=600) as proxy:
            via = urlunsplit(direct._replace(netloc=direct.netloc.replace(
                f"{direct.hostname}:{direct.port}", proxy.url.removeprefix("http://")
            )))  # fmt: skip
            # In a thread: the proxy serves on this loop while the server opens its store.
            server = await asyncio.to_thread(start_server, tmp_path, via, "--workers", "external")
            async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=60) as http:
                assert (await http.get("/v1/runs")).status_code == 200
        try:
            async with httpx.AsyncClient(base_url=server.url, headers=AUTH, timeout=60) as http:
                r = await http.get("/v1/runs")
            lines = list(OUTPUT.get(server.proc.pid, []))
        finally:
            server.stop()
    finally:
        await pg_admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    assert r.status_code == 503, r.text
    request_id = r.headers["x-request-id"]
    assert r.json()["error"] == {
        "type": "store_unavailable",
        "message": f"store unavailable (request {request_id})",
    }
    # The details went to the log, under the same id.
    assert [line for line in lines if request_id in line and name in line], "".join(lines)


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_a_token_shorter_than_16_characters_is_refused(tmp_path: Path, how: str) -> None:
    short = "fifteen-chars!!"
    assert len(short) == 15
    given = ["--token", short] if how == "flag" else []
    env = child_env({"TETHER_API_TOKEN": short} if how == "environment" else None)
    db = f"sqlite:///{tmp_path / 'tether.db'}"
    with subprocess.Popen(
        [sys.executable, "-m", "tether", "--db", db, "serve", "--port", "0", *given],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    ) as proc:  # fmt: skip
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:  # it says it listens, or why it will not
            lines.append(line)
            if line.startswith("tether serve: listening on "):
                proc.terminate()
        code = proc.wait(timeout=60)
    assert code != 0, "".join(lines)
    assert "the API token must be at least 16 characters (this one has 15)" in "".join(lines)


async def test_two_authorization_headers_are_refused(server: ServerProcess) -> None:
    good, bad = f"Bearer {TOKEN}", "Bearer not-the-token-at-all"
    async with httpx.AsyncClient(base_url=server.url) as http:
        for pair in ([good, good], [bad, good], [good, bad]):
            headers = [("Authorization", value) for value in pair]
            r = await http.get("/v1/runs", headers=headers)
            assert r.status_code == 400, (pair, r.status_code)
            assert r.json()["error"]["type"] == "duplicate_authorization"
        assert (await http.get("/v1/runs", headers=AUTH)).status_code == 200


async def test_seq_parameters_take_ascii_digits_only(server: ServerProcess) -> None:
    run_id, _ = await follow(server.url, CHAIN, chain_input(1, 1, 0))
    async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as http:
        for raw in ("+0", "0_0", "-0", "1e1", "0x1"):
            for how in ("header", "query"):
                headers = {"Last-Event-ID": raw} if how == "header" else {}
                params = {"after": raw} if how == "query" else {}
                r = await http.get(f"/v1/runs/{run_id}/events", headers=headers, params=params)
                assert r.status_code == 400, (raw, how, r.status_code)
                assert r.json()["error"]["type"] == "bad_after"
        for raw in ("\u0660", "\u0967", "\uff10"):  # Arabic-Indic, Devanagari, fullwidth 0
            r = await http.get(f"/v1/runs/{run_id}/events", params={"after": raw})
            assert r.status_code == 400, (raw, r.status_code)
        ok = await http.get(f"/v1/runs/{run_id}/events", params={"after": "0"})
        assert ok.status_code == 200 and "id: 1\n" in ok.text
        assert (await http.get(f"/v1/runs/{run_id}/events", params={"after": "-1"})).is_success


async def test_node_kinds_no_registry_declares_are_counted_as_other(tmp_path: Path) -> None:
    server = start_server(tmp_path, f"sqlite:///{tmp_path / 'tether.db'}", "--agent", KINDS)
    try:
        made_up = [f"made-up-{i}" for i in range(5)]
        _, records = await follow(server.url, KINDS, {"kinds": made_up})
        async with httpx.AsyncClient(base_url=server.url, headers=AUTH) as http:
            text = (await http.get("/metrics")).text
    finally:
        assert server.stop() == 0
    assert records[-1].data["status"] == "succeeded"
    assert "made-up" not in text
    [other] = re.findall(r'tether_node_duration_seconds_count\{kind="other"\} (\S+)', text)
    assert float(other) == 5  # the made-up agent's nodes
    assert re.search(r'tether_node_duration_seconds_count\{kind="spawn"\} 1\.0', text), text


# -- bodies with deadlines ----------------------------------------------------------


def _post_head(url: str, length: int, auth: bool) -> bytes:
    host, _, port = url.removeprefix("http://").partition(":")
    token = f"Authorization: Bearer {TOKEN}\r\n" if auth else ""
    return (
        f"POST /v1/runs HTTP/1.1\r\nHost: {host}:{port}\r\n{token}"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


async def _answer(reader: asyncio.StreamReader) -> tuple[int, str]:
    """(status, head) of one answer, its body read too (it has a Content-Length)."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    length = re.search(r"(?im)^content-length: *(\d+)", head)
    await reader.readexactly(int(length.group(1)) if length else 0)
    return int(head.split(" ", 2)[1]), head.lower()


async def _closed(reader: asyncio.StreamReader) -> bool:
    """Whether the server closed the connection (a reset too: it closed on unread bytes)
    without sending anything more; waits for it."""
    try:
        return await reader.read() == b""
    except ConnectionResetError:
        return True


async def _trickle(writer: asyncio.StreamWriter) -> None:
    """A byte of the body at a time, as long as the server takes them."""
    try:
        while True:
            writer.write(b" ")
            await writer.drain()
            await asyncio.sleep(0.3)  # pacing the trickle, not ordering the test
    except (OSError, RuntimeError):
        return  # the server closed the connection


async def test_an_answer_before_the_body_closes_the_connection(tmp_path: Path) -> None:
    # The probe: 22 unauthenticated posts, each trickling its declared body after
    # the 401, against 20 connections: none is kept, and /healthz answers throughout.
    server = start_server(
        tmp_path, f"sqlite:///{tmp_path / 'tether.db'}", "--max-connections", "20"
    )
    trickles: list[asyncio.Task[None]] = []
    writers: list[asyncio.StreamWriter] = []
    try:
        host, _, port = server.url.removeprefix("http://").partition(":")
        async with asyncio.timeout(60):
            for _ in range(22):
                reader, writer = await asyncio.open_connection(host, int(port))
                writers.append(writer)
                writer.write(_post_head(server.url, 100_000, auth=False))
                status, head = await _answer(reader)
                assert status == 401 and "connection: close" in head, head
                trickles.append(asyncio.create_task(_trickle(writer)))
                assert await _closed(reader)  # however the peer trickles
            async with httpx.AsyncClient(base_url=server.url) as http:
                assert (await http.get("/healthz")).status_code == 200
        lines = list(OUTPUT.get(server.proc.pid, []))
    finally:
        for task in trickles:
            task.cancel()
        await asyncio.gather(*trickles, return_exceptions=True)
        for writer in writers:
            writer.close()
        assert server.stop() == 0
    assert not [line for line in lines if "Traceback" in line], "".join(lines)


@pytest.mark.parametrize(
    ("flags", "trickle"),
    [
        (("--body-read-timeout", "1", "--body-timeout", "600"), False),
        (("--body-read-timeout", "600", "--body-timeout", "2"), True),
    ],
    ids=["between-reads", "in-total"],
)
async def test_a_body_too_slow_is_cut(
    tmp_path: Path, flags: tuple[str, ...], trickle: bool
) -> None:
    server = start_server(tmp_path, f"sqlite:///{tmp_path / 'tether.db'}", *flags)
    task: asyncio.Task[None] | None = None
    try:
        host, _, port = server.url.removeprefix("http://").partition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        # Authenticated: the route waits for the body, which comes a byte at a time or
        # stops after its first bytes.
        writer.write(_post_head(server.url, 100_000, auth=True) + b'{"agent": ')
        if trickle:
            task = asyncio.create_task(_trickle(writer))
        async with asyncio.timeout(30):
            assert await _closed(reader)  # cut, without an answer
        writer.close()
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.get("/healthz")).status_code == 200
        lines = list(OUTPUT.get(server.proc.pid, []))
    finally:
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        assert server.stop() == 0
    assert not [line for line in lines if "Traceback" in line], "".join(lines)
