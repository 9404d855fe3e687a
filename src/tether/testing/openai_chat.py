"""OpenAI Chat Completions: request parsing, replies, stream chunks and error bodies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether.testing.conversation import (
    BadRequest,
    Message,
    ModelRequest,
    ToolSpec,
    parse_arguments,
    require,
)
from tether.testing.replies import CREATED, Reply, build_reply, json_pieces, sse
from tether.testing.replies import text_pieces as split_text
from tether.testing.turns import ToolCall, Turn

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


def _content_text(content: object, where: str) -> str:
    """Content is a string, a list of typed parts, or null (assistant with tool calls)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or "type" not in part:
                raise BadRequest(f"{where}: each content part must be an object with a 'type'")
            texts.append(part["text"] if part["type"] == "text" else f"[{part['type']}]")
        return "".join(str(t) for t in texts)
    raise BadRequest(f"{where}: content must be a string, a list of parts, or null")


def _tool_calls(raw: object, where: str) -> tuple[ToolCall, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise BadRequest(f"{where}: tool_calls must be a list")
    calls = []
    for j, call in enumerate(raw):
        here = f"{where}.tool_calls[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise BadRequest(f"{here}: needs 'function' with a 'name'")
        arguments = parse_arguments(function.get("arguments", ""), here)
        calls.append(ToolCall(name=function["name"], arguments=arguments, id=call.get("id")))
    return tuple(calls)


def _message(raw: object, i: int) -> Message:
    where = f"messages[{i}]"
    if not isinstance(raw, dict):
        raise BadRequest(f"{where} must be an object")
    role = raw.get("role")
    if role == "tool":
        call_id = raw.get("tool_call_id")
        if not isinstance(call_id, str):
            raise BadRequest(f"{where}: a tool message needs 'tool_call_id'")
        return Message("tool", _content_text(raw.get("content"), where), tool_call_id=call_id)
    if role not in _ROLES:
        raise BadRequest(f"{where}: unknown role {role!r}")
    calls = _tool_calls(raw.get("tool_calls"), where) if role == "assistant" else ()
    text = _content_text(raw.get("content"), where)
    if role != "assistant" and "content" not in raw:
        raise BadRequest(f"{where}: missing 'content'")
    return Message(_ROLES[role], text, tool_calls=calls)  # type: ignore[arg-type]


def _tool(raw: object, i: int) -> ToolSpec:
    function = raw.get("function") if isinstance(raw, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise BadRequest(f"tools[{i}]: needs type 'function' and 'function.name'")
    return ToolSpec(
        name=function["name"],
        description=str(function.get("description", "")),
        parameters=function.get("parameters") or {},
    )


class OpenAIChat:
    """`POST /v1/chat/completions`."""

    api = "openai.chat"

    def parse(self, body: Mapping[str, Any]) -> ModelRequest:
        model = require(body, "model", str, "a string")
        raw_messages = require(body, "messages", list, "a list of messages")
        if not raw_messages:
            raise BadRequest("'messages' must hold at least one message")
        tools = require(body, "tools", list, "a list") if body.get("tools") is not None else []
        if body.get("n", 1) != 1:
            # A script answers with one turn; silently returning fewer choices than asked
            # would hide the mismatch.
            raise BadRequest(f"n={body['n']} is not supported here: scripts give one choice")
        stream = bool(body.get("stream") or False)
        options = body.get("stream_options") or {}
        return ModelRequest(
            api="openai.chat",
            model=model,
            messages=tuple(_message(m, i) for i, m in enumerate(raw_messages)),
            tools=tuple(_tool(t, i) for i, t in enumerate(tools)),
            stream=stream,
            include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
            body=body,
        )

    def reply(self, request: ModelRequest, turn: Turn) -> Reply:
        return build_reply(request, turn, id_prefix="chatcmpl-", call_prefix="call_")

    def _usage(self, reply: Reply) -> dict[str, int]:
        return {
            "prompt_tokens": reply.usage.input_tokens,
            "completion_tokens": reply.usage.output_tokens,
            "total_tokens": reply.usage.total_tokens,
        }

    def _finish_reason(self, reply: Reply) -> str:
        return "tool_calls" if reply.tool_calls else "stop"

    def render(self, reply: Reply) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": reply.text or None,
            "refusal": None,
        }
        if reply.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_json()},
                }
                for call in reply.tool_calls
            ]
        return {
            "id": reply.id,
            "object": "chat.completion",
            "created": CREATED,
            "model": reply.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "logprobs": None,
                    "finish_reason": self._finish_reason(reply),
                }
            ],
            "usage": self._usage(reply),
            "system_fingerprint": None,
        }

    def events(self, reply: Reply, *, include_usage: bool) -> list[bytes]:
        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            data: dict[str, Any] = {
                "id": reply.id,
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": reply.model,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
                ],
            }
            if include_usage:
                # With include_usage every chunk carries `usage: null` until the last one.
                data["usage"] = None
            return sse(data)

        frames = [chunk({"role": "assistant", "content": ""})]
        frames += [chunk({"content": piece}) for piece in split_text(reply.text)]
        for index, call in enumerate(reply.tool_calls):
            # The first delta of a call names it; later deltas only extend its arguments.
            head = {"index": index, "id": call.id, "type": "function"}
            named = {**head, "function": {"name": call.name, "arguments": ""}}
            frames.append(chunk({"tool_calls": [named]}))
            for piece in json_pieces(call.arguments_json()):
                fragment = {"index": index, "function": {"arguments": piece}}
                frames.append(chunk({"tool_calls": [fragment]}))
        frames.append(chunk({}, self._finish_reason(reply)))
        if include_usage:
            frames.append(
                sse(
                    {
                        "id": reply.id,
                        "object": "chat.completion.chunk",
                        "created": CREATED,
                        "model": reply.model,
                        "choices": [],
                        "usage": self._usage(reply),
                    }
                )
            )
        frames.append(sse("[DONE]"))
        return frames

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind, code = {
            400: ("invalid_request_error", None),
            404: ("invalid_request_error", "model_not_found"),
            429: ("requests", "rate_limit_exceeded"),
        }.get(status, ("server_error", None))
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}
