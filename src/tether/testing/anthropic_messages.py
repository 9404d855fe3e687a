"""Anthropic Messages: request parsing, replies, stream events and error bodies."""

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
from tether.testing.replies import Reply, build_reply, json_pieces, sse, text_pieces
from tether.testing.turns import ToolCall, Turn


def _blocks(content: object, where: str) -> list[dict[str, Any]]:
    """Content is a string (one text block) or a list of typed blocks."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise BadRequest(f"{where}: content must be a string or a list of blocks")
    for j, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise BadRequest(f"{where}.content[{j}] must be an object with a 'type'")
    return content


def _block_text(block: Mapping[str, Any]) -> str:
    if block["type"] == "text":
        return str(block.get("text", ""))
    # Images, documents and thinking blocks carry no text a script needs to match on.
    return f"[{block['type']}]"


def _messages(raw: object, i: int) -> list[Message]:
    """One Anthropic message; a user message with tool results becomes several."""
    where = f"messages[{i}]"
    if not isinstance(raw, dict) or raw.get("role") not in ("user", "assistant"):
        raise BadRequest(f"{where}: must be an object with role 'user' or 'assistant'")
    if "content" not in raw:
        raise BadRequest(f"{where}: missing 'content'")
    blocks = _blocks(raw["content"], where)
    if raw["role"] == "assistant":
        calls = []
        for j, block in enumerate(blocks):
            if block["type"] == "tool_use":
                here = f"{where}.content[{j}]"
                if not isinstance(block.get("name"), str) or not isinstance(block.get("id"), str):
                    raise BadRequest(f"{here}: a tool_use block needs 'id' and 'name'")
                arguments = parse_arguments(block.get("input", {}), here)
                calls.append(ToolCall(name=block["name"], arguments=arguments, id=block["id"]))
        text = "".join(_block_text(b) for b in blocks if b["type"] != "tool_use")
        return [Message("assistant", text, tool_calls=tuple(calls))]
    out = []
    for j, block in enumerate(blocks):
        if block["type"] == "tool_result":
            if not isinstance(block.get("tool_use_id"), str):
                raise BadRequest(f"{where}.content[{j}]: a tool_result needs 'tool_use_id'")
            inner = block.get("content", "")
            text = "".join(_block_text(b) for b in _blocks(inner, f"{where}.content[{j}]"))
            out.append(Message("tool", text, tool_call_id=block["tool_use_id"]))
    text = "".join(_block_text(b) for b in blocks if b["type"] != "tool_result")
    if text or not out:
        out.append(Message("user", text))
    return out


def _system(raw: object) -> list[Message]:
    if raw is None:
        return []
    return [Message("system", "".join(_block_text(b) for b in _blocks(raw, "system")))]


def _tool(raw: object, i: int) -> ToolSpec:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise BadRequest(f"tools[{i}]: needs a 'name'")
    return ToolSpec(
        name=raw["name"],
        description=str(raw.get("description", "")),
        parameters=raw.get("input_schema") or {},
    )


class AnthropicMessages:
    """`POST /v1/messages`."""

    api = "anthropic.messages"

    def parse(self, body: Mapping[str, Any]) -> ModelRequest:
        model = require(body, "model", str, "a string")
        raw_messages = require(body, "messages", list, "a list of messages")
        if not raw_messages:
            raise BadRequest("'messages' must hold at least one message")
        # The real API rejects a request without max_tokens; so do we, so that code
        # tested here does not fail only in production.
        require(body, "max_tokens", int, "an integer")
        tools = require(body, "tools", list, "a list") if body.get("tools") is not None else []
        messages = _system(body.get("system"))
        for i, raw in enumerate(raw_messages):
            messages += _messages(raw, i)
        return ModelRequest(
            api="anthropic.messages",
            model=model,
            messages=tuple(messages),
            tools=tuple(_tool(t, i) for i, t in enumerate(tools)),
            stream=bool(body.get("stream") or False),
            include_usage=True,
            body=body,
        )

    def reply(self, request: ModelRequest, turn: Turn) -> Reply:
        return build_reply(request, turn, id_prefix="msg_", call_prefix="toolu_")

    def _stop_reason(self, reply: Reply) -> str:
        return "tool_use" if reply.tool_calls else "end_turn"

    def _content(self, reply: Reply) -> list[dict[str, Any]]:
        content: list[dict[str, Any]] = []
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        for call in reply.tool_calls:
            tool_use = {"type": "tool_use", "id": call.id, "name": call.name}
            content.append({**tool_use, "input": dict(call.arguments)})
        return content

    def render(self, reply: Reply) -> dict[str, Any]:
        return {
            "id": reply.id,
            "type": "message",
            "role": "assistant",
            "model": reply.model,
            "content": self._content(reply),
            "stop_reason": self._stop_reason(reply),
            "stop_sequence": None,
            "usage": {
                "input_tokens": reply.usage.input_tokens,
                "output_tokens": reply.usage.output_tokens,
            },
        }

    def events(self, reply: Reply, *, include_usage: bool) -> list[bytes]:
        def event(kind: str, **data: Any) -> bytes:
            return sse({"type": kind, **data}, event=kind)

        start = {**self.render(reply), "content": [], "stop_reason": None}
        start["usage"] = {"input_tokens": reply.usage.input_tokens, "output_tokens": 0}
        frames = [event("message_start", message=start), event("ping")]
        for index, block in enumerate(self._content(reply)):
            if block["type"] == "text":
                frames.append(
                    event("content_block_start", index=index, content_block=block | {"text": ""})
                )
                for piece in text_pieces(block["text"]):
                    delta = {"type": "text_delta", "text": piece}
                    frames.append(event("content_block_delta", index=index, delta=delta))
            else:
                # A tool_use block opens with empty input; the JSON arrives in fragments.
                frames.append(
                    event("content_block_start", index=index, content_block=block | {"input": {}})
                )
                call = reply.tool_calls[index - (1 if reply.text else 0)]
                for piece in json_pieces(call.arguments_json()):
                    delta = {"type": "input_json_delta", "partial_json": piece}
                    frames.append(event("content_block_delta", index=index, delta=delta))
            frames.append(event("content_block_stop", index=index))
        frames.append(
            event(
                "message_delta",
                delta={"stop_reason": self._stop_reason(reply), "stop_sequence": None},
                usage={"output_tokens": reply.usage.output_tokens},
            )
        )
        frames.append(event("message_stop"))
        return frames

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = {
            400: "invalid_request_error",
            404: "not_found_error",
            429: "rate_limit_error",
            529: "overloaded_error",
        }.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
