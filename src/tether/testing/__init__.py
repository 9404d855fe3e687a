"""Test your agents offline: a local, scripted model server the official OpenAI and
Anthropic SDKs talk to (the docs' guide "Testing agents offline").

Endpoints: OpenAI Chat Completions (`/v1/chat/completions`), OpenAI Responses
(`/v1/responses`, stateless) and Anthropic Messages (`/v1/messages`), streaming or not.

Tests and `tether demo` use it instead of a real provider: each model name
`"script:<name>"` plays a deterministic script, and faults (429, 5xx, cut streams,
latency) are injected per turn so retry and crash paths can be exercised for real.

    async with serve_local_models({"research": [Turn(text="hi")]}) as server:
        client = openai.AsyncOpenAI(base_url=server.openai_base_url, api_key="x")
"""

from tether.testing.app import LocalModelServer, LoggedRequest
from tether.testing.conversation import BadRequest, Message, ModelRequest, ToolSpec
from tether.testing.faults import ClientError, CutStream, Fault, RateLimited, ServerError
from tether.testing.scripts import Script, ScriptError, ScriptRegistry, TurnList
from tether.testing.serving import (
    ServerStartError,
    run_local_models,
    serve_local_models,
)
from tether.testing.turns import ToolCall, Turn, Usage

__all__ = [
    "BadRequest",
    "ClientError",
    "CutStream",
    "Fault",
    "LocalModelServer",
    "LoggedRequest",
    "Message",
    "ModelRequest",
    "RateLimited",
    "Script",
    "ScriptError",
    "ScriptRegistry",
    "ServerError",
    "ServerStartError",
    "ToolCall",
    "ToolSpec",
    "Turn",
    "TurnList",
    "Usage",
    "run_local_models",
    "serve_local_models",
]
