"""The fault suite's deterministic agent (workers load it as `tests.faults.agent:agent`).

A run is `depth` layers: each fans out `width` work nodes and joins them; a join
spawns the next layer. Every handler first writes one row to `effects` (no unique key:
each row is one execution). Outputs are pure functions of the input, so `expected`
gives the result of an uninterrupted run without running anything.

Two options mix in the rest of what a run does: `flaky` makes each layer's first work
node fail its first attempt (a retry), `sub` makes each layer's second work node run a
small sub-agent (a child run of this agent) and add its result.

`gate` (a file path) holds every work node, after its side effect, until that file
exists: a test opens the gate when it is ready, so "these nodes are in flight and none
has finished" is a state it waits for, not a moment it hopes to hit.

`TETHER_FAULTS_DIE_IN_HANDLER=N` SIGKILLs the process in the Nth handler, after its side
effect is durable and before its record is appended.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import sys
import time
from typing import Any

import asyncpg

from tether import Context, Node, NodeResult, Registry, Retry, Spawn, StoreUnavailable
from tether.foundation.ids import ROOT_ID, child_id

agent = Registry("tests.faults.agent:agent", entry="root")
EFFECTS_SQL = """
CREATE TABLE effects (
    key text NOT NULL, run_id text NOT NULL, node_id text NOT NULL,
    pid integer NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""
_pool: asyncpg.Pool | None = None
_pool_lock = asyncio.Lock()
_handled = 0


def value(seed: int, *parts: Any) -> int:
    digest = hashlib.sha256(repr((seed, *parts)).encode()).digest()
    return int.from_bytes(digest[:4], "big") % 1000


def expected(input: dict[str, Any]) -> int:
    """The result of an uninterrupted run."""
    seed, width, depth = input["seed"], input["width"], input["depth"]
    total = sum(value(seed, level, i) for level in range(depth) for i in range(width))
    if input.get("sub") and width > 1:
        total += sum(expected(sub_input(input, level)) for level in range(depth))
    return total


def sub_input(input: dict[str, Any], level: int) -> dict[str, Any]:
    """The input of the sub-agent that work node 1 of `level` runs."""
    return {"seed": value(input["seed"], level, "sub"), "width": 2, "depth": 1, "delay": 0.0}


def node_ids(input: dict[str, Any]) -> set[str]:
    """Every node id of a run, derived as tether derives them (parent id + key)."""
    ids, spawner = {ROOT_ID}, ROOT_ID
    for _ in range(input["depth"]):
        ids.update(child_id(spawner, f"w{i}") for i in range(input["width"]))
        spawner = child_id(spawner, "join")
        ids.add(spawner)
    return ids


def _layer(input: dict[str, Any], level: int, prev: int) -> list[Spawn]:
    base = {k: input[k] for k in ("seed", "width", "depth", "delay")}
    base.update(flaky=input.get("flaky", False), sub=input.get("sub", False))
    if input.get("gate"):
        base["gate"] = input["gate"]
    width = input["width"]
    spawn = [Spawn("work", {**base, "level": level, "i": i}, key=f"w{i}") for i in range(width)]
    join = {**base, "level": level, "prev": prev}
    spawn.append(Spawn("join", join, key="join", after=[f"w{i}" for i in range(width)]))
    return spawn


async def _effect(ctx: Context) -> None:
    """Record one execution; retried while the database is away (a restart)."""
    global _pool
    deadline = time.monotonic() + 60
    while True:
        try:
            async with _pool_lock:
                if _pool is None:
                    _pool = await asyncpg.create_pool(
                        os.environ["TETHER_DATABASE_URL"], min_size=1, max_size=4
                    )
            await _pool.execute(
                "INSERT INTO effects (key, run_id, node_id, pid) VALUES ($1, $2, $3, $4)",
                ctx.idempotency_key,
                ctx.run_id,
                ctx.node_id,
                os.getpid(),
            )
            return
        # InternalClientError: asyncpg's report of a FATAL that lands mid-protocol (restart).
        except (
            OSError,
            asyncpg.PostgresError,
            asyncpg.InterfaceError,
            asyncpg.InternalClientError,
        ) as exc:
            if time.monotonic() > deadline:
                raise StoreUnavailable(f"effects: {exc}") from exc
            await asyncio.sleep(0.1)


async def _step(ctx: Context, delay: float) -> None:
    global _handled
    await _effect(ctx)
    if delay:
        await asyncio.sleep(delay)
    _handled += 1
    if _handled == int(os.environ.get("TETHER_FAULTS_DIE_IN_HANDLER", "0")):
        sys.stderr.write("tether fault: SIGKILL in a handler, after its side effect\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


async def _wait_gate(gate: str | None) -> None:
    """Return once the file `gate` exists (at once without a gate)."""
    # Polled: the gate is opened by another process, so no event can be awaited, and a
    # stat of a local file is too quick to be worth a thread.
    while gate and not os.path.exists(gate):  # noqa: ASYNC110, ASYNC240
        await asyncio.sleep(0.02)


def open_gate(gate: str) -> None:
    """Let every node held at `gate` go on (the test's side of `_wait_gate`)."""
    with open(gate, "w"):
        pass


@agent.node("root")
async def root(ctx: Context, node: Node) -> NodeResult:
    await _step(ctx, 0)
    return NodeResult(0, spawn=_layer(node.input, 0, 0))


@agent.node("work", retry=Retry(attempts=3, backoff=0.01))
async def work(ctx: Context, node: Node) -> int:
    i, level = node.input["i"], node.input["level"]
    if node.input.get("flaky") and i == 0 and ctx.attempt == 1:
        # Before the side effect: a failed attempt leaves no trace but the retry.
        raise RuntimeError("flaky: the first attempt fails")
    await _step(ctx, node.input["delay"])
    await _wait_gate(node.input.get("gate"))
    out = value(node.input["seed"], level, i)
    if node.input.get("sub") and i == 1:
        out += await ctx.run_child(agent, sub_input(node.input, level), key="sub")
    return out


@agent.node("join")
async def join(ctx: Context, node: Node) -> NodeResult:
    await _step(ctx, 0)
    total = node.input["prev"] + sum((await ctx.parent_outputs()).values())
    level = node.input["level"]
    if level + 1 < node.input["depth"]:
        return NodeResult(total, spawn=_layer(node.input, level + 1, total))
    return NodeResult(total, is_result=True)
