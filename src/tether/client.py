"""An async Python client for `tether serve`: start, read, cancel, resume, follow a run.

    async with TetherClient("http://127.0.0.1:8000", token) as client:
        run = await client.start("demo", {"question": "why?"}, idempotency_key="q-1")
        async for event in client.events(run["run_id"]):
            print(event.seq, event.data["body"])

`events()` survives any cut (gateway timeouts, a replica going away, the server's own
stream time limit): it reconnects with Last-Event-ID and yields each record once, in order.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

try:
    import httpx
except ImportError as exc:  # the extra is not installed
    raise ImportError("tether.client needs httpx: pip install 'tether[client]'") from exc

from tether.foundation.errors import TetherError


class ApiError(TetherError):
    """The server refused a request; `status` and `kind` say how, the message says why."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(f"{status} {kind}: {message}")
        self.status = status
        self.kind = kind


class StreamGaveUp(TetherError):
    """events() could not reconnect for longer than its `give_up_after`."""


@dataclass(frozen=True, slots=True)
class RunEvent:
    """One event of a run's stream: a durable `record` (with its seq) or a `live` one.

    A live event's `data["type"]` says what it is (`token`, `node_started`, ...).
    """

    kind: str
    data: dict[str, Any]
    seq: int | None = None


class TetherClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )

    async def __aenter__(self) -> TetherClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, method: str, url: str, **kw: Any) -> dict[str, Any]:
        response = await self._http.request(method, url, **kw)
        body = _json_or_none(response.content)
        if response.status_code >= 400:
            raise _api_error(response)
        if not isinstance(body, dict):
            raise ApiError(response.status_code, "bad_response", "expected a JSON object")
        return body

    async def start(
        self,
        agent: str,
        input: Any = None,
        *,
        budget: dict[str, float] | None = None,
        idempotency_key: str | None = None,
        key: str | None = None,
        priority: int = 0,
    ) -> dict[str, Any]:
        """Start a run; returns at once with `run_id`, `status` and `urls`.

        With `idempotency_key`, a retried call returns the run the first call started.
        `key` (its concurrency key) and `priority` say how workers claim it.
        """
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        body: dict[str, Any] = {"agent": agent, "input": input}
        if budget:
            body["budget"] = budget
        if key is not None:
            body["key"] = key
        if priority:
            body["priority"] = priority
        return await self._call("POST", "/v1/runs", json=body, headers=headers)

    async def get(self, run_id: str, *, at_seq: int | None = None) -> dict[str, Any]:
        """Status, budget used, counts, timings and nodes of a run; with `at_seq`, as they
        were once the record at that seq was."""
        params = {} if at_seq is None else {"at": at_seq}
        return await self._call("GET", f"/v1/runs/{_q(run_id)}", params=params)

    async def list(
        self, *, status: str | None = None, limit: int = 50, offset: int = 0
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if status:
            params["status"] = status
        return await self._call("GET", "/v1/runs", params=params)

    async def cancel(self, run_id: str) -> dict[str, Any]:
        """Stop a run for good (it finishes CANCELLED); closing a stream never does."""
        return await self._call("POST", f"/v1/runs/{_q(run_id)}/cancel")

    async def resume(
        self, run_id: str, *, budget: dict[str, float | str] | None = None
    ) -> dict[str, Any]:
        """Resume a paused run; `budget` replaces the limits it names, `"+N"` for N more
        than the run used so far (`{"max_nodes": "+2"}`)."""
        return await self._call(
            "POST", f"/v1/runs/{_q(run_id)}/resume", json={"budget": budget} if budget else {}
        )

    async def retry(self, run_id: str) -> dict[str, Any]:
        """Retry a failed run: its records stay, its failed nodes run again as new attempts,
        then it continues (queued for a worker). ApiError 409 `run_not_failed` if the run did
        not fail."""
        return await self._call("POST", f"/v1/runs/{_q(run_id)}/retry")

    async def export(self, run_id: str, *, blobs: bool = False) -> AsyncIterator[bytes]:
        """The run, its sub-agent runs (and with `blobs`, their blobs) as a `.tlog` file,
        chunk by chunk as the server streams it (`tether import` or `import_tlog` reads it)."""
        params = {"blobs": "true"} if blobs else {}
        async with self._http.stream("GET", f"/v1/runs/{_q(run_id)}/export", params=params) as r:
            if r.status_code >= 400:
                await r.aread()
                raise _api_error(r)
            async for chunk in r.aiter_bytes():
                yield chunk

    async def import_tlog(self, data: bytes) -> dict[str, Any]:
        """Import a `.tlog` file into the server's store, all or nothing: the runs created
        (`created`, empty and `already` true if the store had them)."""
        headers = {"Content-Type": "application/octet-stream"}
        return await self._call("POST", "/v1/runs/import", content=data, headers=headers)

    async def fork(
        self,
        run_id: str,
        *,
        at_seq: int | None = None,
        before_node: str | None = None,
        set_outputs: dict[str, Any] | None = None,
        set_inputs: dict[str, Any] | None = None,
        budget: dict[str, float | str] | None = None,
    ) -> dict[str, Any]:
        """A new queued run whose history is the run's records up to `at_seq` (or before
        `before_node` was recorded), with `set_outputs` replacing recorded outputs and
        `set_inputs` the inputs of nodes pending there; the answer names the fork
        (`run_id`) and its source (`forked_from`)."""
        body: dict[str, Any] = {"at_seq": at_seq, "before_node": before_node}
        if set_outputs:
            body["set_outputs"] = set_outputs
        if set_inputs:
            body["set_inputs"] = set_inputs
        if budget:
            body["budget"] = budget
        body = {k: v for k, v in body.items() if v is not None}
        return await self._call("POST", f"/v1/runs/{_q(run_id)}/fork", json=body)

    async def upgrade(self, run_id: str, to: str) -> dict[str, Any]:
        """Move a run to version `to` of its agent's code (the server's code must be that
        version and able to continue it; otherwise ApiError 422 and nothing changes)."""
        return await self._call("POST", f"/v1/runs/{_q(run_id)}/upgrade", json={"to": to})

    async def schedules(self) -> dict[str, Any]:
        """The server's schedules (`{"schedules": [...]}`, by name): cron, agent, input, time
        zone, next fire time."""
        return await self._call("GET", "/v1/schedules")

    async def add_schedule(
        self,
        name: str,
        *,
        cron: str,
        agent: str,
        input: Any = None,
        timezone: str = "UTC",
        catch_up: str = "skip",
    ) -> dict[str, Any]:
        """Add a schedule: workers start a run of `agent` at each `cron` time, once.
        ApiError 422 (nothing stored) for a bad cron, zone, name or input, 409 for a taken
        name."""
        body = {"name": name, "cron": cron, "agent": agent, "input": input,
                "timezone": timezone, "catch_up": catch_up}  # fmt: skip
        return await self._call("POST", "/v1/schedules", json=body)

    async def remove_schedule(self, name: str) -> dict[str, Any]:
        """Remove a schedule (ApiError 404 if there is none); the runs it queued stay."""
        return await self._call("DELETE", f"/v1/schedules/{quote(name, safe='')}")

    async def limits(self) -> dict[str, Any]:
        """The concurrency limits (`{"limits": [...]}`), each with the runs holding its
        slots now."""
        return await self._call("GET", "/v1/limits")

    async def set_limit(
        self, agent: str, max_running: int, *, key: str | None = None, each_key: bool = False
    ) -> dict[str, Any]:
        """Cap the runs of `agent` (of its `key`, or of each key) executing at once, across
        every worker. ApiError 422 (nothing stored) for a limit below 1 or an unknown agent."""
        body = {"agent": agent, "max_running": max_running, "key": key, "each_key": each_key}
        return await self._call("PUT", "/v1/limits", json=body)

    async def remove_limit(
        self, agent: str, *, key: str | None = None, each_key: bool = False
    ) -> dict[str, Any]:
        """Lift a limit (ApiError 404 if that scope has none); its waiting runs start."""
        params: dict[str, Any] = {"agent": agent}
        if key is not None:
            params["key"] = key
        if each_key:
            params["each_key"] = "1"
        return await self._call("DELETE", "/v1/limits", params=params)

    async def workers(self) -> dict[str, Any]:
        """The live workers (`{"workers": [...]}`): versions served, runs held, last beat."""
        return await self._call("GET", "/v1/workers")

    async def signal(
        self, run_id: str, key: str, payload: Any = None, *, event_id: str | None = None
    ) -> dict[str, Any]:
        """Deliver an event to wait `key` of a run; returns once the server recorded it.

        With `event_id`, a retry (after a timeout, say) is a no-op (`duplicate` true).
        ApiError 404 (unknown run or wait), 409 (answered already), 422 (payload does not
        fit the wait's schema), 503 (the run is held elsewhere; retry).
        """
        headers = {"Idempotency-Key": event_id} if event_id else {}
        return await self._call(
            "POST", f"/v1/runs/{_q(run_id)}/signals/{_q(key)}", json=payload, headers=headers
        )

    async def events(
        self,
        run_id: str,
        *,
        after: int = -1,
        tokens: bool = False,
        give_up_after: float = 120.0,
    ) -> AsyncIterator[RunEvent]:
        """Follow a run until it finishes: every record once, in order, across any cut.

        Live events (kind `live`: tokens, node_started) are best effort and only come with
        `tokens`. A `record` is yielded only with its SSE id equal to its seq.
        Raises StreamGaveUp after `give_up_after` seconds without a working connection.
        """
        last = after
        delay = 0.1
        failing_since: float | None = None
        while True:
            connected = False
            headers = {"Last-Event-ID": str(last)} if last >= 0 else {}
            params = {"tokens": "1"} if tokens else {}
            try:
                async with self._http.stream(
                    "GET",
                    f"/v1/runs/{_q(run_id)}/events",
                    headers=headers,
                    params=params,
                    timeout=httpx.Timeout(30.0, read=None),
                ) as response:
                    if response.status_code == 204:
                        return  # the run finished and we have its last record already
                    if response.status_code >= 500:
                        raise httpx.TransportError(f"server answered {response.status_code}")
                    if response.status_code >= 400:
                        await response.aread()
                        body = _json_or_none(response.content) or {}
                        err = body.get("error", {}) if isinstance(body, dict) else {}
                        raise ApiError(
                            response.status_code,
                            err.get("type", "http"),
                            err.get("message", ""),
                        )
                    failing_since, delay, connected = None, 0.1, True
                    async for message in _messages(response):
                        kind, data = message.kind, message.data
                        if message.retry_ms is not None:
                            delay = message.retry_ms / 1000
                        if kind == "record":
                            seq = _record_seq(message)
                            if seq is None or seq <= last:
                                # Not a record without its id (nothing durable comes
                                # without one), nor one already yielded before a reconnect.
                                continue
                            last = seq
                            yield RunEvent(kind, data, seq)
                        elif kind == "end":
                            return
                        elif kind == "reconnect":
                            delay = 0.0
                            break
                        elif kind is not None:
                            yield RunEvent(kind, data)
            except (httpx.TransportError, httpx.StreamError):
                if failing_since is None and connected:
                    # A working stream was cut (a gateway timeout, a replica going away):
                    # reconnect at once; back off only while connecting fails.
                    failing_since, delay = time.monotonic(), 0.0
                    continue
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > give_up_after:
                    raise StreamGaveUp(
                        f"run {run_id}: no connection to the server for {give_up_after:g}s "
                        f"(last seq {last}); call events(after={last}) to continue"
                    ) from None
                delay = min(max(delay, 0.1) * 2, 5.0)
            await asyncio.sleep(delay)


@dataclass(frozen=True, slots=True)
class _Message:
    kind: str | None
    data: dict[str, Any]
    retry_ms: int | None
    id: str | None


_LINE_END = re.compile(r"\r\n|\r|\n")


async def _lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The lines of an SSE stream, as its specification splits them: UTF-8, ended by CRLF,
    LF or CR only. Not str.splitlines(), which also splits on U+2028, U+2029, U+0085 and
    other code points a JSON string may hold raw; a line the stream never ended is dropped.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    buf, first = "", True
    async for chunk in chunks:
        buf += decoder.decode(chunk)
        if first and buf:
            buf, first = buf.removeprefix("\ufeff"), False
        start = 0
        for end in _LINE_END.finditer(buf):
            if end.group() == "\r" and end.end() == len(buf):
                break  # perhaps the first half of a CRLF: wait for the next chunk
            yield buf[start : end.start()]
            start = end.end()
        buf = buf[start:]
    buf += decoder.decode(b"", final=True)
    if buf.endswith("\r"):
        yield buf[:-1]


async def _messages(response: httpx.Response) -> AsyncIterator[_Message]:
    """Each SSE message of a response; comments are dropped."""
    kind: str | None = None
    data: list[str] = []
    retry: int | None = None
    msg_id: str | None = None
    async for line in _lines(response.aiter_bytes()):
        if line == "":
            if kind is not None or data or retry is not None:
                payload = _json_or_none("\n".join(data).encode()) if data else {}
                if not isinstance(payload, dict):
                    payload = {}
                yield _Message(kind or ("message" if data else None), payload, retry, msg_id)
            kind, data, retry, msg_id = None, [], None, None
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            kind = value
        elif field == "data":
            data.append(value)
        elif field == "id":
            msg_id = value
        elif field == "retry" and value.isdigit():
            retry = int(value)


def _record_seq(message: _Message) -> int | None:
    """The seq of a durable record: its SSE id, which its data must repeat; else None."""
    if message.id is None or not (message.id.isascii() and message.id.isdigit()):
        return None
    seq = message.data.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq != int(message.id):
        return None
    return seq


def _q(part: str) -> str:
    """One path segment, percent-encoded."""
    return quote(part, safe="")


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def _api_error(response: httpx.Response) -> ApiError:
    """The ApiError an error answer names (its JSON `error`, or the start of its text)."""
    body = _json_or_none(response.content)
    err = (body or {}).get("error", {}) if isinstance(body, dict) else {}
    return ApiError(
        response.status_code, err.get("type", "http"), err.get("message", response.text[:200])
    )
