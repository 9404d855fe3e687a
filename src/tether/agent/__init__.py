"""LLM agents on tether: model turns, concurrent tools and sub-agents, built on nodes."""

from tether.agent.loop import Agent
from tether.agent.mcp import MCPServer, MCPUnavailable, mcp_server
from tether.agent.messages import Message, ModelReply, ToolCallRequest, ToolSpec
from tether.agent.pricing import cost_of, register_price
from tether.agent.providers import AnthropicMessages, OpenAIChat, Provider, provider_for
from tether.agent.retries import ModelError
from tether.agent.tools import Tool, ToolArgumentsError, tool
from tether.foundation.errors import ModelNotConfigured, ModelUnavailable

__all__ = [
    "Agent",
    "AnthropicMessages",
    "MCPServer",
    "MCPUnavailable",
    "Message",
    "ModelError",
    "ModelNotConfigured",
    "ModelReply",
    "ModelUnavailable",
    "OpenAIChat",
    "Provider",
    "Tool",
    "ToolArgumentsError",
    "ToolCallRequest",
    "ToolSpec",
    "cost_of",
    "mcp_server",
    "provider_for",
    "register_price",
    "tool",
]
