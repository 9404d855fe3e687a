"""Model calls through the official OpenAI and Anthropic async SDKs, streaming tokens."""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from tether.agent.messages import Message, ModelReply, OnToken, ToolCallRequest, ToolSpec
from tether.foundation.errors import ModelNotConfigured

# What to await right before a model request's bytes are sent (the shared rate limit's
# wait, set by `tether.agent.ratelimits`): as late as can be, so the time a call is let
# start is the time the provider sees it, not that plus the SDK's first-call set-up.
BEFORE_SEND: ContextVar[Callable[[], Awaitable[None]] | None] = ContextVar(
    "tether_before_send", default=None
)


async def _before_send(request: object) -> None:
    hook = BEFORE_SEND.get()
    if hook is not None:
        await hook()


class Provider(ABC):
    """One model behind one SDK client; SDK retries are off, the caller owns retrying.

    A provider whose requests await `BEFORE_SEND` (as the built-in ones do, through their
    HTTP client's request hook) says so with `awaits_before_send`; for any other, the
    caller waits before calling `complete`.
    """

    awaits_before_send = False

    def __init__(self, model: str) -> None:
        self.model = model

    @abstractmethod
    async def complete(
        self, system: str, messages: list[Message], tools: list[ToolSpec], on_token: OnToken
    ) -> ModelReply: ...

    async def close(self) -> None:
        return None


def _loads(raw: str) -> Any:
    try:
        return json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        return raw  # passed to the tool's validation, which explains it to the model


class OpenAIChat(Provider):
    """OpenAI Chat Completions, or any endpoint that speaks it (`base_url`)."""

    awaits_before_send = True

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None):
        import openai

        super().__init__(model)
        self.client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "unset",
            max_retries=0,
            http_client=openai.DefaultAsyncHttpxClient(event_hooks={"request": [_before_send]}),
        )

    @staticmethod
    def to_openai(system: str, messages: list[Message]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        for m in messages:
            if m["role"] == "assistant":
                msg: dict[str, Any] = {"role": "assistant", "content": m["content"] or None}
                if m["tool_calls"]:
                    msg["tool_calls"] = [
                        {
                            "id": c["id"],
                            "type": "function",
                            "function": {
                                "name": c["name"],
                                "arguments": json.dumps(c["arguments"]),
                            },
                        }
                        for c in m["tool_calls"]
                    ]
                out.append(msg)
            elif m["role"] == "tool":
                out.append(
                    {"role": "tool", "tool_call_id": m["tool_call_id"], "content": m["content"]}
                )
            else:
                out.append({"role": "user", "content": m["content"]})
        return out

    async def complete(
        self, system: str, messages: list[Message], tools: list[ToolSpec], on_token: OnToken
    ) -> ModelReply:
        params: dict[str, Any] = {
            "model": self.model,
            "messages": self.to_openai(system, messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if tools:
            params["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.schema,
                    },
                }
                for t in tools
            ]
        # Built as a dict: the SDK's overloads cannot type a stream flag chosen at run time.
        create: Any = self.client.chat.completions.create
        stream = await create(**params)
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        tokens_in = tokens_out = 0
        async for chunk in stream:
            if chunk.usage is not None:
                tokens_in, tokens_out = chunk.usage.prompt_tokens, chunk.usage.completion_tokens
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    text.append(delta.content)
                    on_token(delta.content)
                for tc in delta.tool_calls or ():
                    call = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                    if tc.id:
                        call["id"] = tc.id
                    if tc.function and tc.function.name:
                        call["name"] += tc.function.name
                    if tc.function and tc.function.arguments:
                        call["arguments"] += tc.function.arguments
        return ModelReply(
            "".join(text),
            [
                ToolCallRequest(c["id"], c["name"], _loads(c["arguments"]))
                for _, c in sorted(calls.items())
            ],
            tokens_in,
            tokens_out,
        )

    async def close(self) -> None:
        await self.client.close()


class AnthropicMessages(Provider):
    """Anthropic Messages."""

    awaits_before_send = True

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_tokens: int = 4096,
    ):
        import anthropic

        super().__init__(model)
        self.max_tokens = max_tokens
        self.client = anthropic.AsyncAnthropic(
            base_url=base_url,
            api_key=api_key or os.environ.get("ANTHROPIC_API_KEY") or "unset",
            max_retries=0,
            http_client=anthropic.DefaultAsyncHttpxClient(event_hooks={"request": [_before_send]}),
        )

    @staticmethod
    def to_anthropic(messages: list[Message]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for m in messages:
            if m["role"] == "assistant":
                blocks: list[dict[str, Any]] = []
                if m["content"]:
                    blocks.append({"type": "text", "text": m["content"]})
                blocks += [
                    {"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["arguments"]}
                    for c in m["tool_calls"]
                ]
                out.append({"role": "assistant", "content": blocks})
            elif m["role"] == "tool":
                block = {
                    "type": "tool_result",
                    "tool_use_id": m["tool_call_id"],
                    "content": m["content"],
                    "is_error": bool(m.get("is_error")),
                }
                # Consecutive tool results travel in one user message.
                if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                    out[-1]["content"].append(block)
                else:
                    out.append({"role": "user", "content": [block]})
            else:
                out.append({"role": "user", "content": m["content"]})
        return out

    async def complete(
        self, system: str, messages: list[Message], tools: list[ToolSpec], on_token: OnToken
    ) -> ModelReply:
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": self.to_anthropic(messages),
        }
        if system:
            params["system"] = system
        if tools:
            params["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.schema}
                for t in tools
            ]
        async with self.client.messages.stream(**params) as stream:
            async for event in stream:
                if event.type == "text":
                    on_token(event.text)
            final = await stream.get_final_message()
        text = "".join(b.text for b in final.content if b.type == "text")
        calls = [
            ToolCallRequest(b.id, b.name, b.input) for b in final.content if b.type == "tool_use"
        ]
        return ModelReply(text, calls, final.usage.input_tokens, final.usage.output_tokens)

    async def close(self) -> None:
        await self.client.close()


# Each provider: its SDK's environment variables for the API key and the base URL.
PROVIDERS = {
    "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
}


def split_model(spec: str) -> tuple[str, str]:
    """`openai:gpt-4.1` -> ("openai", "gpt-4.1"); ModelNotConfigured for anything else."""
    name, sep, model = spec.partition(":")
    if not sep or not model:
        raise ModelNotConfigured(
            repr(spec),
            "write it as provider:model, e.g. 'openai:gpt-4.1' or 'anthropic:claude-sonnet-4'",
        )
    if name not in PROVIDERS:
        raise ModelNotConfigured(
            repr(spec), f"unknown provider {name!r} (use {' or '.join(PROVIDERS)})"
        )
    return name, model


def key_variable(spec: str) -> str:
    """The environment variable that holds the API key for `spec`'s provider."""
    return PROVIDERS[split_model(spec)[0]][0]


def check_model(spec: str, *, base_url: str | None = None, api_key: str | None = None) -> None:
    """Refuse a model that cannot be called as configured, before any request: an unknown
    provider, or no API key for a provider's own endpoint (a `base_url`, the agent's or from
    the SDK's variable, is a compatible server that may need none). ModelNotConfigured,
    naming the variable to set."""
    name, _ = split_model(spec)
    key_var, url_var = PROVIDERS[name]
    if api_key or os.environ.get(key_var):
        return
    if base_url or os.environ.get(url_var):
        return
    raise ModelNotConfigured(
        spec, f"no API key: set {key_var} (or pass api_key= to the agent)", variable=key_var
    )


def provider_for(spec: str, *, base_url: str | None = None, api_key: str | None = None) -> Provider:
    """`openai:gpt-4.1`, `anthropic:claude-sonnet-4`; `base_url` for compatible endpoints."""
    name, model = split_model(spec)
    if name == "openai":
        return OpenAIChat(model, base_url=base_url, api_key=api_key)
    return AnthropicMessages(model, base_url=base_url, api_key=api_key)
