"""Journaled steps: workflow-style code inside a node, recorded one step at a time.

`await ctx.step(name, fn, *args)` runs `fn` once and appends a StepRecorded with its
result before returning it. When the node runs again (a crash, a drain, a retry), its
handler runs from the top, and each step it asks for gets its recorded result back, by
position, without running again; the first step with no record runs for real. A step
whose name differs from the record at its position is NonDeterministicStep: the run
pauses and nothing of the node is recorded.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tether.blobs import BlobError
from tether.foundation.core import Retry, StepResult
from tether.foundation.errors import (
    CannotContinue,
    ChildPaused,
    LogGap,
    NonDeterministicStep,
    RecordTooLarge,
    RunMustPause,
    StaleEpoch,
    StepBudgetExhausted,
    StepTimeout,
    StoreFull,
)
from tether.model.records import BudgetUsed, Record, dump_json, encode, now_us, step_recorded

if TYPE_CHECKING:
    from tether.engine.executor import RunExecutor

# A step without a policy of its own runs once.
_ONCE = Retry()
# Not a step's failure but the run's: a pause, a fence, a log that lost its tail (the run is
# reloaded), an unreadable blob, a sub-agent run this code cannot continue (a deploy in
# progress), a store with no space left (the run pauses). Never retried.
STOPS_NODE = (
    RunMustPause,
    ChildPaused,
    StaleEpoch,
    LogGap,
    BlobError,
    CannotContinue,
    StoreFull,
)


class StepJournal:
    """The steps of one attempt of one node: replays the recorded ones, records new ones."""

    def __init__(self, run: RunExecutor, node_id: str) -> None:
        self._run = run
        self._node_id = node_id
        # Steps asked for so far; the next one's position. Taken before the first await,
        # so steps started together (asyncio.gather) get positions in the order started.
        self.taken = 0

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        args: Sequence[Any],
        *,
        retry: Retry | None,
        timeout_s: float | None,
    ) -> Any:
        index, self.taken = self.taken, self.taken + 1
        run, nid = self._run, self._node_id
        steps = run.graph.steps_of(nid)
        recorded = steps.get(index) if steps else None
        if recorded is not None:
            if recorded.name != name:
                raise NonDeterministicStep(run.graph.run_id, nid, index, recorded.name, name)
            return await run.codec.decode(recorded.output)
        # Budgets act between steps as between nodes: a framework's whole agent loop may
        # be one node, and a limit must still stop it before the next model call.
        reason = run.graph.exhausted(now_us())
        if reason:
            raise StepBudgetExhausted(f"{reason} (before step {index} {name!r} of node {nid})")
        policy = retry or _ONCE
        started_us, t0 = now_us(), time.perf_counter()
        attempt = 0
        while True:
            attempt += 1
            try:
                out = await _call(fn, args, timeout_s, name)
                break
            except STOPS_NODE:
                raise
            except Exception as exc:
                if isinstance(exc, policy.retry_on) and attempt < policy.attempts:
                    await asyncio.sleep(policy.delay(attempt))
                    continue
                raise
        value, usage = (out.output, out.usage) if isinstance(out, StepResult) else (out, None)
        output = await run.codec.encode(value)
        used = BudgetUsed(wall_ms=int((time.perf_counter() - t0) * 1000))
        if usage is not None:
            used.tokens_in, used.tokens_out = usage.tokens_in, usage.tokens_out
            used.cost, used.model_calls = usage.cost, usage.model_calls
        record = step_recorded(
            nid, index, name, output=output, used=used, attempt=attempt, started_at_us=started_us
        )
        await self._append(record)
        # The live run gets what a replay would: the value as its JSON decodes.
        if output.WhichOneof("kind") == "json":
            return json.loads(output.json)
        return json.loads(dump_json(value))

    async def _append(self, record: Record) -> None:
        run = self._run
        data = encode(record)
        if len(data) > run.runtime.record_cap:
            raise RecordTooLarge(run.graph.run_id, self._node_id, len(data), run.runtime.record_cap)
        # Shielded: once an append starts it finishes (and is applied) even if this node is
        # cancelled, so the executor's next record never races a step for the same seq.
        await asyncio.shield(run.record_step(record, data))

    def check_done(self) -> None:
        """At the node's end: every recorded step was asked for again (else the code changed)."""
        steps = self._run.graph.steps_of(self._node_id)
        if not steps:
            return
        left = sorted(i for i in steps if i >= self.taken)
        if left:
            first = steps[left[0]]
            raise NonDeterministicStep(
                self._run.graph.run_id, self._node_id, first.index, first.name, "no step (the end)"
            )


async def _call(
    fn: Callable[..., Any], args: Sequence[Any], timeout_s: float | None, name: str
) -> Any:
    if timeout_s is None:
        return await _invoke(fn, args)
    try:
        async with asyncio.timeout(timeout_s) as cm:
            return await _invoke(fn, args)
    except TimeoutError:
        if cm.expired():
            raise StepTimeout(f"step {name!r} timed out after {timeout_s:g}s") from None
        raise


async def _invoke(fn: Callable[..., Any], args: Sequence[Any]) -> Any:
    result = fn(*args)
    if inspect.isawaitable(result):
        return await result
    return result
