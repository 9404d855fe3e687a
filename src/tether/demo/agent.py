"""The demo: a research agent (parallel tools, a join, a sub-agent, an answer) on a scripted model.

By default the model is the local scripted server (no network, deterministic), reached
through the real OpenAI SDK; `tether demo --model openai:gpt-4.1` uses a real provider.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from tether.agent import Agent, register_price, tool
from tether.demo.chart import bar_chart
from tether.demo.pace import set_speed
from tether.demo.pace import speed as _speed
from tether.engine.context import Context
from tether.foundation.core import Retry

SCRIPTED = "openai:script:research"
# Priced like gpt-4.1, so the demo's cost and cost budget mean something.
register_price("script:", 2.00, 8.00)


def _digest(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


@tool(retry=Retry(attempts=3, backoff=0.1))
async def search(query: str) -> str:
    """Search the web for a query."""
    await asyncio.sleep(_speed() * (0.3 + (_digest(query) % 50) / 100))
    return f"{query}: {_digest(query) % 90 + 10} sources agree it needs checkpoints"


@tool
async def calc(expression: str) -> float:
    """Multiply two numbers written as `a * b`."""
    a, b = (float(x) for x in expression.split("*"))
    return round(a * b, 3)


@tool
async def score(note: str) -> int:
    """Score how strong a finding is, 0 to 99."""
    await asyncio.sleep(_speed() * 0.2)
    return _digest(note) % 100


@tool
async def report(ctx: Context, title: str, findings: list[str]) -> dict[str, Any]:
    """Write the report: a chart of how many sources back each finding, and a summary."""
    bars = []
    for finding in findings:
        topic, _, rest = finding.partition(":")
        words = rest.split()
        bars.append((topic.strip(), int(words[0]) if words and words[0].isdigit() else 0))
    # Both go to the blob store; the node's record keeps (url, size, sha256) of each.
    chart = await ctx.attach(bar_chart("sources per angle", bars), "image/png")
    lines = [f"# {title}", "", *(f"- {topic}: {n} sources" for topic, n in bars), ""]
    lines.append(f"Chart: sources per angle (image/png, sha256 {chart.sha256}).")
    text = await ctx.attach("\n".join(lines).encode(), "text/markdown")
    return {
        "chart": {"media_type": "image/png", "size": chart.size, "sha256": chart.sha256},
        "report": {"media_type": "text/markdown", "size": text.size, "sha256": text.sha256},
    }


analyst = Agent(
    "demo.analyst",
    model=SCRIPTED.replace("research", "analyst"),
    system="You weigh findings and name the strongest.",
    tools=[score],
    tool_name="analyst",
    description="Hand the analyst a question about the findings.",
)
research = Agent(
    "demo",
    model=SCRIPTED,
    system="You are a careful researcher. Use tools in parallel when you can.",
    tools=[search, calc, analyst, report],
)
agent = research.registry
# `tether submit demo` with no input asks the demo's question, as `tether demo` does.
DEFAULT_QUESTION = "How do agents survive a rolling deploy?"
agent.default_input = {"prompt": DEFAULT_QUESTION}


def require_approval(tool_name: str = "calc") -> None:
    """`tether demo --approve`: the model's calls to this tool wait for a person.

    Only the turn that calls it decides to wait (its record spawns the wait), so a run
    started so is resumed by any process, whether or not that process asked for approvals.
    """
    research.tools[tool_name] = dataclasses.replace(research.tools[tool_name], approval=True)


@asynccontextmanager
async def demo_models(
    model: str | None = None, *, speed: float | None = None
) -> AsyncIterator[str]:
    """Point the demo agents at a model: the local scripted server unless `model` is given;
    `speed` paces its tools and scripted turns (None: as `tether.demo.pace` says)."""
    if speed is not None:
        set_speed(speed)
    if model:
        for a in (research, analyst):
            a.model, a.base_url = model, None
        yield model
        return
    from tether.demo.scripts import SCRIPTS
    from tether.testing import serve_local_models

    async with serve_local_models(SCRIPTS) as server:
        for a in (research, analyst):
            a.base_url = server.openai_base_url
        try:
            yield f"scripted model at {server.base_url}"
        finally:
            await research.aclose()


# `tether resume` and `tether retry` bring the demo's model up around its runs (a registry
# hook: the command knows no agent by name).
agent.services_fn = demo_models
