"""The server's state (scripts, fault counters, request log) and its Starlette app."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tether.testing.anthropic_messages import AnthropicMessages
from tether.testing.conversation import BadRequest, ModelRequest
from tether.testing.faults import CutStream, Fault, fault_name
from tether.testing.openai_chat import OpenAIChat
from tether.testing.openai_responses import OpenAIResponses
from tether.testing.replies import CREATED, Dialect, Reply
from tether.testing.responses import PacedResponse
from tether.testing.scripts import MODEL_PREFIX, Script, ScriptError, ScriptRegistry
from tether.testing.turns import Turn

log = logging.getLogger(__name__)
# When the request being handled arrived, before its body was read or parsed.
_ARRIVED: ContextVar[float] = ContextVar("localserver_arrived", default=0.0)


@dataclass(frozen=True, slots=True)
class LoggedRequest:
    """One request the server answered: what was asked and what was answered.

    `turn_index` is the number of assistant turns the request already held; `attempt`
    counts earlier requests for the same conversation state (0 for the first).
    """

    api: str
    model: str
    stream: bool
    turn_index: int | None
    attempt: int
    status: int
    outcome: str
    body: Mapping[str, Any]
    reply: Reply | None = None
    error: str | None = None
    # When the request reached the server (seconds since the epoch): what rate tests count.
    at: float = field(default_factory=lambda: _ARRIVED.get() or time.time())


class LocalModelServer:
    """Scripted OpenAI- and Anthropic-compatible endpoints as one ASGI app.

    Serve it with `serve_local_models`, or mount `app` under any ASGI server.
    """

    def __init__(self, scripts: Mapping[str, Sequence[Turn] | Script] | None = None) -> None:
        self.scripts = ScriptRegistry(scripts)
        self.requests: list[LoggedRequest] = []
        self._attempts: dict[str, int] = {}
        self._injected: deque[Fault] = deque()
        self._base_url: str | None = None
        openai, anthropic = OpenAIChat(), AnthropicMessages()
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._endpoint(openai), methods=["POST"]),
                Route("/v1/responses", self._endpoint(OpenAIResponses()), methods=["POST"]),
                Route("/v1/messages", self._endpoint(anthropic), methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/health", self._health, methods=["GET"]),
            ]
        )

    # -- the parts tests use ------------------------------------------------------

    @property
    def base_url(self) -> str:
        """`http://host:port` once serving; raises before."""
        if self._base_url is None:
            raise RuntimeError("the local model server is not serving; use serve_local_models")
        return self._base_url

    @property
    def openai_base_url(self) -> str:
        """What to pass as `AsyncOpenAI(base_url=...)` (the SDK adds only the path)."""
        return self.base_url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        """What to pass as `AsyncAnthropic(base_url=...)` (the SDK adds `/v1/...`)."""
        return self.base_url

    def inject(self, *faults: Fault) -> None:
        """Serve these faults, in order, to the next requests whatever their model.

        An injected fault still counts as an attempt of the request it hits, so it
        shifts which of that turn's own `faults` the following requests get.
        """
        self._injected.extend(faults)

    def requests_for(self, model: str) -> list[LoggedRequest]:
        return [r for r in self.requests if r.model == model]

    def reset(self) -> None:
        """Forget the log, the fault counters and any injected faults."""
        self.requests.clear()
        self._attempts.clear()
        self._injected.clear()

    # -- request handling ---------------------------------------------------------

    def _endpoint(self, dialect: Dialect) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            _ARRIVED.set(time.time())
            return await self._handle(dialect, request)

        return endpoint

    async def _handle(self, dialect: Dialect, http_request: Request) -> Response:
        try:
            raw = await http_request.body()
        except ClientDisconnect:
            # The client went before sending its body (a process stopping now, its model
            # calls cancelled): nobody reads an answer, and it is no error of the server's.
            return Response(status_code=499)
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            return self._refuse(dialect, {}, 400, "bad_request", "the body must be a JSON object")
        try:
            request = dialect.parse(body)
        except BadRequest as exc:
            return self._refuse(dialect, body, 400, "bad_request", str(exc))
        try:
            script = self.scripts.resolve(request.model)
        except ScriptError as exc:
            return self._refuse(dialect, body, 404, "unknown_model", str(exc), request)
        try:
            turn = script(request.messages, request.tools)
        except ScriptError as exc:
            return self._refuse(dialect, body, 400, "script_error", str(exc), request)
        except Exception as exc:
            # A bug in a test's script: say so, and tell the SDK not to retry it.
            log.exception("script for %s raised", request.model)
            message = f"script for '{request.model}' raised {type(exc).__name__}: {exc}"
            headers = {"x-should-retry": "false"}
            return self._refuse(dialect, body, 500, "script_error", message, request, headers)
        return await self._answer(dialect, request, turn)

    def _next_fault(self, request: ModelRequest, turn: Turn) -> tuple[int, Fault | None]:
        attempt = self._attempts.get(request.fingerprint, 0)
        self._attempts[request.fingerprint] = attempt + 1
        if self._injected:
            return attempt, self._injected.popleft()
        return attempt, turn.faults[attempt] if attempt < len(turn.faults) else None

    def _log_answer(
        self,
        dialect: Dialect,
        request: ModelRequest,
        attempt: int,
        fault: Fault | None,
        status: int,
        reply: Reply | None,
    ) -> None:
        self.requests.append(
            LoggedRequest(
                api=dialect.api,
                model=request.model,
                stream=request.stream,
                turn_index=request.assistant_turns,
                attempt=attempt,
                status=status,
                outcome=fault_name(fault),
                body=request.body,
                reply=reply,
            )
        )

    async def _answer(self, dialect: Dialect, request: ModelRequest, turn: Turn) -> Response:
        attempt, fault = self._next_fault(request, turn)
        if fault is not None and not isinstance(fault, CutStream):
            self._log_answer(dialect, request, attempt, fault, fault.status, None)
            body = dialect.error_body(fault.status, fault.message)
            return JSONResponse(body, status_code=fault.status, headers=fault.headers())
        reply = dialect.reply(request, turn)
        self._log_answer(dialect, request, attempt, fault, 200, reply)
        cut_after = fault.after_events if isinstance(fault, CutStream) else None
        if request.stream:
            frames = dialect.events(reply, include_usage=request.include_usage)
            return PacedResponse(
                frames,
                media_type="text/event-stream",
                headers={"cache-control": "no-cache"},
                first_delay=turn.latency,
                chunk_delay=turn.chunk_delay,
                # Always lose at least the last event, or the cut would go unnoticed.
                cut_after=None if cut_after is None else min(cut_after, len(frames) - 1),
            )
        if turn.latency:
            await asyncio.sleep(turn.latency)
        document = json.dumps(dialect.render(reply), ensure_ascii=False).encode()
        if cut_after is None:
            return Response(document, media_type="application/json")
        half = len(document) // 2
        return PacedResponse(
            [document[:half], document[half:]],
            media_type="application/json",
            cut_after=1,
            content_length=len(document),
        )

    def _refuse(
        self,
        dialect: Dialect,
        body: Mapping[str, Any],
        status: int,
        outcome: str,
        message: str,
        request: ModelRequest | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Response:
        self.requests.append(
            LoggedRequest(
                api=dialect.api,
                model=str(body.get("model", "")),
                stream=bool(body.get("stream", False)),
                turn_index=request.assistant_turns if request else None,
                attempt=0,
                status=status,
                outcome=outcome,
                body=body,
                error=message,
            )
        )
        return JSONResponse(
            dialect.error_body(status, message), status_code=status, headers=headers
        )

    async def _models(self, request: Request) -> Response:
        data = [
            {"id": MODEL_PREFIX + name, "object": "model", "created": CREATED, "owned_by": "tether"}
            for name in self.scripts.names()
        ]
        return JSONResponse({"object": "list", "data": data})

    async def _health(self, request: Request) -> Response:
        return PlainTextResponse("ok")
