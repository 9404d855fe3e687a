"""An agent for the shared rate-limit tests: one model turn on the local model server, whose
URL worker processes read from TETHER_TEST_MODEL_URL."""

from __future__ import annotations

import os
from collections.abc import Sequence

from tether.agent import Agent
from tether.testing import Message, ToolSpec, Turn

MODEL = "openai:script:rated"
URL = os.environ.get("TETHER_TEST_MODEL_URL", "http://127.0.0.1:9")


def answer(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> Turn:
    """One answer to any prompt."""
    return Turn(text="answered: " + messages[-1].text[:40])


rated = Agent("rated", model=MODEL, base_url=URL + "/v1", api_key="test").registry
