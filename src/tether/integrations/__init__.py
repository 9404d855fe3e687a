"""Bring your own agent framework: pydantic-ai, the OpenAI Agents SDK, built on journaled steps.

Each integration is a module of its own with its framework as an optional extra
(`tether[pydantic-ai]`, `tether[openai-agents]`); importing this package imports none.
"""
