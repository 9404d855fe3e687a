"""Agents the server tests start: slow chains of fan-outs, one that attaches a file, and
one that emits forged stream events."""

from __future__ import annotations

import asyncio
import struct
import zlib
from pathlib import Path
from typing import Any

from tether import Context, Node, NodeResult, Registry, Spawn, Usage, Wait

# A chain of `n` steps; between two steps, `width` leaves run side by side. Every node
# sleeps `delay` seconds: simulated model and tool latency.
chain = Registry("test.server.chain", entry="step")


@chain.node("step")
async def step(ctx: Context, node: Node) -> NodeResult:
    i, n, width, delay = (node.input[k] for k in ("i", "n", "width", "delay"))
    for word in ("thinking", "about", f"step {i}"):
        ctx.emit({"type": "token", "text": word + " "})
        await asyncio.sleep(delay / 3)
    if i + 1 >= n:
        return NodeResult({"steps": n}, is_result=True)
    leaves = [Spawn("leaf", {"delay": delay, "j": j}, key=f"l{j}") for j in range(width)]
    nxt = {"i": i + 1, "n": n, "width": width, "delay": delay}
    after = [f"l{j}" for j in range(width)]
    return NodeResult({"step": i}, spawn=[*leaves, Spawn("step", nxt, key="next", after=after)])


@chain.node("leaf")
async def leaf(ctx: Context, node: Node) -> int:
    await asyncio.sleep(node.input["delay"])
    return int(node.input["j"])


def chain_input(n: int, width: int, delay: float) -> dict[str, Any]:
    return {"i": 0, "n": n, "width": width, "delay": delay}


def chain_nodes(n: int, width: int) -> int:
    """How many nodes a chain run records."""
    return n + (n - 1) * width


files = Registry("test.server.files", entry="write")


@files.node("write")
async def write(ctx: Context, node: Node) -> NodeResult:
    media_type = node.input.get("media_type", "text/plain")
    ref = await ctx.attach(node.input["text"].encode(), media_type)
    return NodeResult({"sha256": ref.sha256}, is_result=True)


# Emits live events dressed as durable records until the file `until` exists (the test's
# handshake: it has seen one), then fails: a stream that believed them would say finished.
forger = Registry("test.server.forger", entry="forge")
FORGED = {"type": "record", "body": "run_finished", "status": "succeeded", "seq": 10**9}


@forger.node("forge")
async def forge(ctx: Context, node: Node) -> None:
    until = Path(node.input["until"])
    for _ in range(1200):  # at most a minute
        ctx.emit({**FORGED, "run_id": "someone-else", "node_id": "not-me", "id": 7})
        if await asyncio.to_thread(until.exists):
            break
        await asyncio.sleep(0.05)  # pacing the emitter, not ordering the test
    raise RuntimeError("the forger fails for real")


# The console's tour: a plan node streams tokens, a sub-agent run researches, a node
# attaches a PNG, and an answer node sums it up. Each node waits for the file `gate`
# when the input names one, so a test can hold the run where it wants it.
console = Registry("test.server.console", entry="plan")
helper = Registry("test.server.helper", entry="look")


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A solid PNG image: the smallest real picture a node can attach."""
    raw = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))
    chunk = lambda kind, data: (  # noqa: E731
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    )
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


async def _gate(node: Node) -> None:
    gate = node.input.get("gate") if isinstance(node.input, dict) else None
    for _ in range(1200):  # at most a minute
        if not gate or await asyncio.to_thread(Path(gate).exists):
            return
        await asyncio.sleep(0.05)  # waiting for the test's handshake file


@console.node("plan")
async def plan(ctx: Context, node: Node) -> NodeResult:
    await _gate(node)
    for word in ("first", "look", "it", "up,", "then", "draw", "it"):
        ctx.emit({"type": "token", "text": word + " "})
    gate = node.input.get("gate")
    return NodeResult(
        {"plan": ["look", "draw"]},
        spawn=[
            Spawn("research", {"gate": gate}, key="research"),
            Spawn("draw", {"gate": gate}, key="draw"),
            Spawn("answer", None, key="answer", after=["research", "draw"]),
        ],
    )


@console.node("research")
async def research(ctx: Context, node: Node) -> Any:
    await _gate(node)
    return await ctx.run_child(helper, {"topic": "tether"})


@console.node("draw")
async def draw(ctx: Context, node: Node) -> NodeResult:
    await _gate(node)
    ref = await ctx.attach(png(48, 24, (21, 101, 192)), "image/png")
    return NodeResult({"chart": ref.sha256}, usage=Usage(120, 30, 0.0021, model_calls=1))


@console.node("answer")
async def answer(ctx: Context, node: Node) -> NodeResult:
    return NodeResult("tether keeps every node", is_result=True)


@helper.node("look")
async def look(ctx: Context, node: Node) -> dict[str, Any]:
    return {"found": f"notes on {node.input['topic']}"}


# Parks at once, waiting for an "approve" event (the console shows what it waits for).
approval = Registry("test.server.approval", entry="ask")


@approval.node("ask")
async def ask(ctx: Context, node: Node) -> NodeResult:
    return NodeResult({"ask": "delete?"}, spawn=[Wait("approve", timeout=3600)])


# Hands its `text` back in every output and live event, whatever characters it holds:
# `parts` nodes each output it, then a last node returns it. With `child_key`, the first
# node runs `helper` as a sub-agent run under that key first.
echo = Registry("test.server.echo", entry="echo")


@echo.node("echo")
async def echo_text(ctx: Context, node: Node) -> NodeResult:
    text = node.input.get("text", "")
    ctx.emit({"type": "token", "text": text})
    if "child_key" in node.input:
        await ctx.run_child(helper, {"topic": "keys"}, key=node.input["child_key"])
    parts = [Spawn("part", {"text": text, "i": i}, key=f"p{i}") for i in range(node.input["parts"])]
    after = [f"p{i}" for i in range(len(parts))] or None
    last = Spawn("last", {"text": text}, key="last", after=after)
    return NodeResult({"text": text}, spawn=[*parts, last])


@echo.node("part")
async def echo_part(ctx: Context, node: Node) -> dict[str, Any]:
    return {"text": node.input["text"], "i": node.input["i"]}


@echo.node("last")
async def echo_last(ctx: Context, node: Node) -> NodeResult:
    return NodeResult({"text": node.input["text"]}, is_result=True)


# Makes up an agent at run time, its node kinds the words of its input (a model's, say),
# and runs it as a sub-agent run: kinds no registry declared when the server started.
kinds = Registry("test.server.kinds", entry="spawn")


def _then(nxt: str | None) -> Any:
    async def handler(ctx: Context, node: Node) -> NodeResult:
        if nxt is None:
            return NodeResult("done", is_result=True)
        return NodeResult(None, spawn=[Spawn(nxt, None, key="next")])

    return handler


@kinds.node("spawn")
async def spawn_kinds(ctx: Context, node: Node) -> Any:
    names = node.input["kinds"]
    made = Registry(f"test.server.made.{ctx.run_id}", entry=names[0])
    for i, name in enumerate(names):
        made.add(name, _then(names[i + 1] if i + 1 < len(names) else None))
    return await ctx.run_child(made, None)
