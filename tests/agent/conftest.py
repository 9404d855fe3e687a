"""Fixtures: a local model server per test, and the real SDK clients pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anthropic
import openai
import pytest

from tether.testing import LocalModelServer, serve_local_models


@pytest.fixture
async def models() -> AsyncIterator[LocalModelServer]:
    """A running server with no scripts; each test adds its own with `scripts.add`."""
    async with serve_local_models() as server:
        yield server


@pytest.fixture
async def oai(models: LocalModelServer) -> AsyncIterator[openai.AsyncOpenAI]:
    # max_retries=0 by default so a fault surfaces; tests that want retries say so.
    async with openai.AsyncOpenAI(
        base_url=models.openai_base_url, api_key="any-key", max_retries=0
    ) as client:
        yield client


@pytest.fixture
async def claude(models: LocalModelServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(
        base_url=models.anthropic_base_url, api_key="any-key", max_retries=0
    ) as client:
        yield client
