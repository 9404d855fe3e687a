"""OpenAI Responses (`POST /v1/responses`): stateless subset, full input every time.

`previous_response_id` is refused: chaining on server-side state would make a reply
depend on what this server happened to see before, not on the request alone.
"""

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
from tether.testing.openai_chat import OpenAIChat
from tether.testing.replies import (
    CREATED,
    Reply,
    build_reply,
    derived_id,
    json_pieces,
    sse,
    text_pieces,
)
from tether.testing.turns import ToolCall, Turn

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


def _text(content: object, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"{where}: content must be a string or a list of parts")
    parts = []
    for part in content:
        if not isinstance(part, dict) or "type" not in part:
            raise BadRequest(f"{where}: each content part must be an object with a 'type'")
        parts.append(str(part.get("text", "")) if "text" in part else f"[{part['type']}]")
    return "".join(parts)


def _conversation(items: list[Any]) -> list[Message]:
    """Input items to messages; an assistant message and the calls after it are one turn."""
    messages: list[Message] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise BadRequest(f"{where} must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            if item.get("role") not in _ROLES:
                raise BadRequest(f"{where}: unknown role {item.get('role')!r}")
            role = _ROLES[item["role"]]
            messages.append(Message(role, _text(item.get("content", ""), where)))  # type: ignore[arg-type]
        elif kind == "function_call":
            if not isinstance(item.get("name"), str) or not isinstance(item.get("call_id"), str):
                raise BadRequest(f"{where}: a function_call needs 'name' and 'call_id'")
            call = ToolCall(
                item["name"], parse_arguments(item.get("arguments", ""), where), item["call_id"]
            )
            last = messages[-1] if messages else None
            if last is not None and last.role == "assistant":
                messages[-1] = Message("assistant", last.text, tool_calls=(*last.tool_calls, call))
            else:
                messages.append(Message("assistant", "", tool_calls=(call,)))
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise BadRequest(f"{where}: a function_call_output needs 'call_id'")
            output = item.get("output", "")
            messages.append(Message("tool", _text(output, where), tool_call_id=item["call_id"]))
        # Reasoning and other item types carry nothing a script matches on.
    return messages


def _tool(raw: object, i: int) -> ToolSpec:
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
        raise BadRequest(f"tools[{i}]: needs type 'function' and a 'name'")
    return ToolSpec(raw["name"], str(raw.get("description") or ""), raw.get("parameters") or {})


class OpenAIResponses:
    """`POST /v1/responses`."""

    api = "openai.responses"

    def parse(self, body: Mapping[str, Any]) -> ModelRequest:
        model = require(body, "model", str, "a string")
        if body.get("previous_response_id") is not None:
            raise BadRequest("previous_response_id is not supported here: send the whole input")
        raw_input = body.get("input")
        if raw_input is None:
            raise BadRequest("missing required field 'input' (a string or a list of items)")
        items = (
            [{"role": "user", "content": raw_input}] if isinstance(raw_input, str) else raw_input
        )
        if not isinstance(items, list) or not items:
            raise BadRequest("'input' must be a non-empty string or list of items")
        tools = require(body, "tools", list, "a list") if body.get("tools") is not None else []
        instructions = body.get("instructions")
        system = [Message("system", str(instructions))] if instructions else []
        return ModelRequest(
            api="openai.responses",
            model=model,
            messages=tuple(system + _conversation(items)),
            tools=tuple(_tool(t, i) for i, t in enumerate(tools)),
            stream=bool(body.get("stream") or False),
            include_usage=True,
            body=body,
        )

    def reply(self, request: ModelRequest, turn: Turn) -> Reply:
        return build_reply(request, turn, id_prefix="resp_", call_prefix="call_")

    def _items(self, reply: Reply) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if reply.text:
            part = {"type": "output_text", "text": reply.text, "annotations": []}
            items.append(
                {
                    "type": "message",
                    "id": derived_id("msg_", reply.id, "message"),
                    "status": "completed",
                    "role": "assistant",
                    "content": [part],
                }
            )
        for i, call in enumerate(reply.tool_calls):
            items.append(
                {
                    "type": "function_call",
                    "id": derived_id("fc_", reply.id, f"call{i}"),
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments_json(),
                    "status": "completed",
                }
            )
        return items

    def render(self, reply: Reply) -> dict[str, Any]:
        usage = reply.usage
        return {
            "id": reply.id,
            "object": "response",
            "created_at": CREATED,
            "status": "completed",
            "model": reply.model,
            "output": self._items(reply),
            "usage": {
                "input_tokens": usage.input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": usage.output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage.total_tokens,
            },
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "metadata": {},
            "parallel_tool_calls": True,
            "temperature": None,
            "tool_choice": "auto",
            "tools": [],
            "top_p": None,
        }

    def events(self, reply: Reply, *, include_usage: bool) -> list[bytes]:
        frames: list[bytes] = []

        def event(kind: str, **data: Any) -> None:
            # Every Responses event carries a running sequence number.
            frames.append(sse({"type": kind, "sequence_number": len(frames), **data}, event=kind))

        done = self.render(reply)
        started = {**done, "status": "in_progress", "output": [], "usage": None}
        event("response.created", response=started)
        event("response.in_progress", response=started)
        for index, item in enumerate(done["output"]):
            at = {"output_index": index, "item_id": item["id"]}
            if item["type"] == "message":
                event(
                    "response.output_item.added",
                    output_index=index,
                    item={**item, "content": [], "status": "in_progress"},
                )
                empty = {"type": "output_text", "text": "", "annotations": []}
                event("response.content_part.added", **at, content_index=0, part=empty)
                for piece in text_pieces(reply.text):
                    event(
                        "response.output_text.delta",
                        **at,
                        content_index=0,
                        delta=piece,
                        logprobs=[],
                    )
                event(
                    "response.output_text.done", **at, content_index=0, text=reply.text, logprobs=[]
                )
                event("response.content_part.done", **at, content_index=0, part=item["content"][0])
            else:
                opened = {**item, "arguments": "", "status": "in_progress"}
                event("response.output_item.added", output_index=index, item=opened)
                for piece in json_pieces(item["arguments"]):
                    event("response.function_call_arguments.delta", **at, delta=piece)
                event("response.function_call_arguments.done", **at, arguments=item["arguments"])
            event("response.output_item.done", output_index=index, item=item)
        event("response.completed", response=done)
        return frames

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        return OpenAIChat().error_body(status, message)
