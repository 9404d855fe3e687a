"""Agents whose nodes take journaled steps, for the step tests and the golden steps log."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from tether import Context, Node, NodeResult, Registry, Retry, StepResult, Usage

# How often each step function body ran, by "run_id/name": executions, not records.
CALLS: Counter[str] = Counter()
# The names the `flow` handler asks for, in order; a test changes it to play a code change.
FLOW_STEPS: list[str] = ["plan", "fetch", "write"]
# Set by a test: the step (by name) that blocks until cancelled, to play a crash mid-run;
# its event is set when the step starts.
HANG_AT: dict[str, asyncio.Event] = {}

steps_agent = Registry("test.steps", entry="flow")
steps_fanout = Registry("test.steps.fanout", entry="fanout")
steps_flaky = Registry("test.steps.flaky", entry="flaky")
steps_big = Registry("test.steps.big", entry="big")


async def _work(ctx: Context, name: str, i: int) -> StepResult:
    CALLS[f"{ctx.run_id}/{name}"] += 1
    if name in HANG_AT:
        HANG_AT[name].set()
        await asyncio.Event().wait()
    return StepResult({"name": name, "i": i}, usage=Usage(tokens_in=10, tokens_out=5, cost=0.01))


@steps_agent.node("flow")
async def flow(ctx: Context, node: Node) -> NodeResult:
    results: list[Any] = []
    for i, name in enumerate(FLOW_STEPS):
        results.append(await ctx.step(name, _work, ctx, name, i))
    return NodeResult(results, is_result=True)


@steps_fanout.node("fanout")
async def fanout(ctx: Context, node: Node) -> NodeResult:
    # Steps started together take positions in the order they start.
    names = [f"tool{i}" for i in range(node.input or 4)]
    results = await asyncio.gather(*(ctx.step(n, _work, ctx, n, i) for i, n in enumerate(names)))
    return NodeResult(list(results), is_result=True)


FLAKY: Counter[str] = Counter()


async def _flaky(key: str, fail_times: int, sleep_s: float) -> str:
    FLAKY[key] += 1
    if FLAKY[key] <= fail_times:
        if sleep_s:
            await asyncio.sleep(sleep_s)
        raise ConnectionError(f"attempt {FLAKY[key]} of {key} failed")
    return f"ok after {FLAKY[key]}"


@steps_flaky.node("flaky")
async def flaky(ctx: Context, node: Node) -> NodeResult:
    out = await ctx.step(
        "call",
        _flaky,
        ctx.run_id,
        node.input["fail_times"],
        node.input.get("sleep_s", 0),
        retry=Retry(attempts=3, backoff=0.001),
        timeout_s=node.input.get("timeout_s"),
    )
    return NodeResult(out, is_result=True)


@steps_big.node("big")
async def big(ctx: Context, node: Node) -> NodeResult:
    out = await ctx.step("load", lambda: {"text": "x" * 10_000})
    again = await ctx.step("size", len, out["text"])
    return NodeResult(again, is_result=True)
