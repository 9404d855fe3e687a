"""A multi-turn research agent on a scripted model: fan-out tools, a join, a sub-agent, an answer.

Everything is a deterministic function of the node's input and its ancestors' outputs, so an
interrupted and resumed run gives the same answer as an uninterrupted one.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from typing import Any

from tether.context import Context
from tether.core import Node, NodeResult, Retry, Spawn, Usage
from tether.registry import Registry

agent = Registry("demo", entry="turn")
analyst = Registry("demo.analyst", entry="turn")

# Seconds of simulated model and tool latency (TETHER_DEMO_SPEED=0 makes it instant).
SPEED = float(os.environ.get("TETHER_DEMO_SPEED", "1"))

TOPICS = ["durable execution", "gateway timeouts", "rolling deploys", "OOM kills"]


def _digest(*parts: Any) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:4], "big")


async def _latency(base: float, *key: Any) -> None:
    if SPEED > 0:
        await asyncio.sleep(SPEED * base * (0.6 + (_digest(*key) % 80) / 100))


def _usage(text: str) -> Usage:
    tokens_in = 200 + len(text) // 3
    tokens_out = 20 + len(text) // 4
    cost = (tokens_in * 2 + tokens_out * 8) / 1_000_000
    return Usage(tokens_in, tokens_out, cost=cost, model_calls=1)


def _turn(
    ctx: Context, content: str, calls: list[dict[str, Any]], *, final: bool = False
) -> NodeResult:
    message = {"role": "assistant", "content": content, "tool_calls": calls}
    usage = _usage(content + repr(calls))
    if final:
        return NodeResult(message, usage=usage, is_result=True)
    spawn = [Spawn("subagent" if c["name"] == "analyst" else "tool", c, key=c["id"]) for c in calls]
    spawn.append(
        Spawn(
            "turn",
            {"turn": ctx.node.input.get("turn", 0) + 1},
            key="next",
            after=[c["id"] for c in calls],
        )
    )
    return NodeResult(message, spawn=spawn, usage=usage)


async def _tool_results(ctx: Context) -> dict[str, Any]:
    results = {}
    for nid in ctx.node.parent_ids:
        out = await ctx.output_of(nid)
        results[out["name"]] = out["result"]
    return results


@agent.node("turn", retry=Retry(attempts=3, backoff=0.2))
async def turn(ctx: Context, node: Node) -> NodeResult:
    """The scripted model: search in parallel, consult the analyst, then answer."""
    k = node.input.get("turn", 0)
    question = (await ctx.run_input())["question"]
    await _latency(0.4, "turn", k)
    if k == 0:
        calls = [
            {"id": f"search-{i}", "name": "search", "args": {"query": t}}
            for i, t in enumerate(TOPICS)
        ]
        return _turn(ctx, f"Let me research {question!r} from {len(TOPICS)} angles at once.", calls)
    results = await _tool_results(ctx)
    if k == 1:
        notes = sorted(r for r in results.values())
        calls = [
            {"id": "analyst", "name": "analyst", "args": {"notes": notes}},
            {"id": "calc", "name": "calc", "args": {"expr": "0.3 * 40"}},
        ]
        return _turn(ctx, "I have the sources; asking the analyst and checking a figure.", calls)
    answer = (
        f"Answer to {question!r}: {results['analyst']} "
        f"Checkpointing 40 turns costs about {results['calc']} ms in total."
    )
    return _turn(ctx, answer, [], final=True)


@agent.node("tool", retry=Retry(attempts=3, backoff=0.1), timeout=30)
async def tool(ctx: Context, node: Node) -> dict[str, Any]:
    """Simulated tools with I/O latency: `search` and `calc`."""
    name, args = node.input["name"], node.input["args"]
    await _latency(0.5, name, args)
    if name == "search":
        q = args["query"]
        return {
            "name": q,
            "result": f"{q}: {_digest(q) % 90 + 10} sources agree it needs checkpoints",
        }
    if name == "calc":
        a, b = (float(x) for x in args["expr"].split("*"))
        return {"name": "calc", "result": round(a * b, 3)}
    raise ValueError(f"the demo has no tool {name!r}")


@agent.node("subagent")
async def subagent(ctx: Context, node: Node) -> dict[str, Any]:
    """Run the analyst as a child run (its own log, resumed on its own)."""
    summary = await ctx.run_child(analyst, node.input["args"], key="analyst")
    return {"name": "analyst", "result": summary}


@analyst.node("turn")
async def analyst_turn(ctx: Context, node: Node) -> NodeResult:
    """Score every note concurrently, then summarize."""
    await _latency(0.3, "analyst", node.input)
    if node.parent_ids == ():
        notes = node.input["notes"]
        spawn = [Spawn("score", n, key=f"s{i}") for i, n in enumerate(notes)]
        spawn.append(
            Spawn(
                "turn", {"summarize": True}, key="next", after=[f"s{i}" for i in range(len(notes))]
            )
        )
        return NodeResult(
            {"content": f"scoring {len(notes)} notes"}, spawn=spawn, usage=_usage("x" * 300)
        )
    scores = [await ctx.output_of(p) for p in node.parent_ids]
    best = max(scores, key=lambda s: (s["score"], s["note"]))
    text = f"the strongest finding is '{best['note']}' (score {best['score']})."
    return NodeResult(text, usage=_usage(text), is_result=True)


@analyst.node("score")
async def score(ctx: Context, node: Node) -> dict[str, Any]:
    await _latency(0.3, "score", node.input)
    return {"note": node.input, "score": _digest(node.input) % 100}
