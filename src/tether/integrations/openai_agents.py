"""The OpenAI Agents SDK on tether: model calls and tool calls become journaled steps.

`DurableRunner(agent)` turns an `agents.Agent` (with its handoffs) into a tether agent
whose one node runs `Runner.run` (or, with `stream=True`, `Runner.run_streamed`). Each agent
is cloned with its model wrapped so every model call is `ctx.step(...)` (a streamed call is
recorded whole, from its final `response.completed` event, while its text goes to tether's
live token stream), its function tools wrapped so every call is a step too, and every
handoff built with `handoff(..., on_handoff=...)` wrapped so its callback runs once, as a
step. A handoff is decided by a recorded model response, so a resumed run hands off the same
way without asking again. A tool with `needs_approval` becomes a durable wait per call
(`ask`): the node records the SDK's `RunState` and the run parks until each call is approved
or rejected, then a new node goes on from that state. The run loop is what is replayed.
Tracing is the SDK's own and stays as configured.

    runner = DurableRunner(agent)
    outcome = await runner.run("Where is my order?", runtime=Runtime(store))
"""

from __future__ import annotations

import asyncio
import dataclasses
import weakref
from collections.abc import AsyncIterator, Sequence
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    Handoff,
    Model,
    ModelProvider,
    MultiProvider,
    Runner,
    RunResultStreaming,
    RunState,
    ToolApprovalItem,
)
from agents.items import ModelResponse
from openai.types.responses import ResponseCompletedEvent
from pydantic import TypeAdapter
from pydantic_core import to_jsonable_python

from tether.agent.loop import APPROVAL_SCHEMA
from tether.agent.pricing import cost_of
from tether.agent.ratelimits import RateGate
from tether.engine.context import Context
from tether.engine.executor import Outcome
from tether.engine.registry import Registry
from tether.engine.runtime import Runtime
from tether.foundation.core import Budget, Node, NodeResult, Retry, Spawn, StepResult, Usage, Wait
from tether.integrations.scope import NodeScope, current_scope, node_scope
from tether.model.waits import WAIT_KIND
from tether.store.rates import RateLimit

_RESPONSE = TypeAdapter(ModelResponse)


def rate_key_for(model: Model | str | None, model_name: str) -> str:
    """The shared rate limit a model's calls take from by default: its provider and name.

    A name routed by the SDK's `MultiProvider` prefix (`litellm/anthropic/claude-3-5`) is
    keyed by that prefix (`litellm:anthropic/claude-3-5`); a plain name, or a model of the
    SDK's OpenAI classes, by `openai:`; another Model class by its lowercased name."""
    if isinstance(model, Model) and not type(model).__name__.startswith("OpenAI"):
        provider = type(model).__name__.removesuffix("Model").lower() or "model"
        return f"{provider}:{model_name}"
    prefix, slash, rest = model_name.partition("/")
    if slash and prefix and rest:
        return f"{prefix}:{rest}"
    return f"openai:{model_name}"


class DurableModel(Model):
    """A model whose calls inside a tether node are journaled steps (outside, the model as is)."""

    def __init__(
        self,
        model: Model | str | None,
        provider: ModelProvider,
        *,
        agent_name: str,
        rate_key: str | None = None,
        rate_limits: Sequence[RateLimit] = (),
    ) -> None:
        # A model name is resolved on first use, so its client is made where the run runs.
        self._model = model if isinstance(model, Model) else None
        self._provider = provider
        self.model_name = model if isinstance(model, str) else getattr(model, "model", "")
        self.step_name = f"{agent_name}.model"
        # The shared rate limit its calls take from (`tether limits set --model`): by
        # default the model's, named as tether's own agents name OpenAI models.
        self.rate_gate = RateGate(rate_key or rate_key_for(model, self.model_name), rate_limits)

    @property
    def inner(self) -> Model:
        if self._model is None:
            self._model = self._provider.get_model(self.model_name or None)
        return self._model

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        scope = current_scope()
        if scope is None:
            return await self.inner.get_response(*args, **kwargs)

        async def call() -> StepResult:
            response = await self.rate_gate.metered(
                scope.ctx,
                lambda: self.inner.get_response(*args, **kwargs),
                lambda r: r.usage.input_tokens + r.usage.output_tokens,
            )
            u = response.usage
            usage = Usage(
                u.input_tokens,
                u.output_tokens,
                cost_of(self.model_name, u.input_tokens, u.output_tokens),
                model_calls=1,
            )
            return StepResult(_RESPONSE.dump_python(response, mode="json"), usage)

        recorded = await scope.ctx.step(self.step_name, call)
        return _RESPONSE.validate_python(recorded)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        scope = current_scope()
        if scope is None:
            return self.inner.stream_response(*args, **kwargs)
        return self._journaled_stream(scope, args, kwargs)

    async def _journaled_stream(
        self, scope: NodeScope, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> AsyncIterator[Any]:
        """A streamed model call as one step: its events pass through as they come, and the
        step records the final `response.completed` event only. Replayed, the step yields
        that event alone (the Runner builds its ModelResponse from it)."""
        live: asyncio.Queue[Any] = asyncio.Queue()

        async def produce() -> ResponseCompletedEvent:
            completed: ResponseCompletedEvent | None = None
            async for event in self.inner.stream_response(*args, **kwargs):
                if isinstance(event, ResponseCompletedEvent):
                    completed = event
                else:
                    live.put_nowait(event)
            if completed is None:
                raise RuntimeError(f"{self.step_name}: the stream ended without its response")
            return completed

        def tokens(event: ResponseCompletedEvent) -> int:
            u = event.response.usage
            return 0 if u is None else u.input_tokens + u.output_tokens

        async def call() -> StepResult:
            event = await self.rate_gate.metered(scope.ctx, produce, tokens)
            u = event.response.usage
            tin, tout = (0, 0) if u is None else (u.input_tokens, u.output_tokens)
            usage = Usage(tin, tout, cost_of(self.model_name, tin, tout), model_calls=1)
            return StepResult(event.model_dump(mode="json"), usage)

        step = asyncio.ensure_future(scope.ctx.step(f"{self.step_name}.stream", call))
        try:
            while not step.done() or not live.empty():
                if not live.empty():
                    yield live.get_nowait()
                    continue
                getter = asyncio.ensure_future(live.get())
                await asyncio.wait({step, getter}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield getter.result()
                else:
                    getter.cancel()
            yield ResponseCompletedEvent.model_validate(step.result())
        finally:
            if not step.done():
                step.cancel()


def _durable_tool(tool: FunctionTool, agent_name: str) -> FunctionTool:
    invoke = tool.on_invoke_tool
    name = f"{agent_name}.tool:{tool.name}"

    async def on_invoke_tool(tool_ctx: Any, arguments: str) -> Any:
        scope = current_scope()
        if scope is None:
            return await invoke(tool_ctx, arguments)
        return await scope.ctx.step(name, invoke, tool_ctx, arguments)

    return dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)


def durable_agent(
    agent: Agent[Any],
    provider: ModelProvider,
    done: dict[int, Agent[Any]] | None = None,
    *,
    rate_key: str | None = None,
    rate_limits: Sequence[RateLimit] = (),
) -> Agent[Any]:
    """A clone of `agent` and of every agent it hands off to, with durable models and tools
    whose model calls take from the shared rate limit of their model (or `rate_key`)."""
    done = {} if done is None else done
    if id(agent) in done:
        return done[id(agent)]
    model = DurableModel(
        agent.model, provider, agent_name=agent.name, rate_key=rate_key, rate_limits=rate_limits
    )
    clone = agent.clone(
        model=model,
        tools=[
            _durable_tool(t, agent.name) if isinstance(t, FunctionTool) else t for t in agent.tools
        ],
    )
    done[id(agent)] = clone
    clone.handoffs = [
        durable_agent(h, provider, done, rate_key=rate_key, rate_limits=rate_limits)
        if isinstance(h, Agent)
        else _durable_handoff(h, agent.name, provider, done, rate_key, rate_limits)
        for h in agent.handoffs
    ]
    return clone


def _durable_handoff(
    h: Handoff[Any, Any],
    agent_name: str,
    provider: ModelProvider,
    done: dict[int, Agent[Any]],
    rate_key: str | None,
    rate_limits: Sequence[RateLimit],
) -> Handoff[Any, Any]:
    """A handoff whose invocation (its `on_handoff` callback, its input) runs once, as a
    step recording the agent it hands off to, and whose target is the durable clone."""
    original = h._agent_ref() if h._agent_ref is not None else None
    target = (
        durable_agent(original, provider, done, rate_key=rate_key, rate_limits=rate_limits)
        if isinstance(original, Agent)
        else None
    )
    invoke = h.on_invoke_handoff
    name = f"{agent_name}.handoff:{h.tool_name}"

    async def on_invoke_handoff(run_ctx: Any, arguments: str) -> Any:
        scope = current_scope()
        if scope is None:
            return await invoke(run_ctx, arguments)

        async def effect() -> str:
            return str((await invoke(run_ctx, arguments)).name)

        chosen = await scope.ctx.step(name, effect)
        if target is None or target.name != chosen:
            raise RuntimeError(f"{name}: handed off to {chosen!r}, which is not its agent")
        return target

    wrapped = dataclasses.replace(h, on_invoke_handoff=on_invoke_handoff)
    wrapped._agent_ref = weakref.ref(target) if target is not None else h._agent_ref
    return wrapped


def _call_id(item: ToolApprovalItem) -> str:
    raw = item.raw_item
    found = raw.get("call_id") or raw.get("id") if isinstance(raw, dict) else None
    found = found or getattr(raw, "call_id", None) or getattr(raw, "id", None)
    return str(found)


def _arguments(item: ToolApprovalItem) -> Any:
    import json

    raw = item.raw_item
    text = raw.get("arguments") if isinstance(raw, dict) else getattr(raw, "arguments", None)
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return text


def ask(
    ctx: Context, items: Sequence[ToolApprovalItem], *, timeout: float | None
) -> list[Spawn | Wait]:
    """One wait per tool call awaiting approval, and the node that goes on once all are
    answered (from the RunState the asking node recorded)."""
    waits: dict[str, str] = {}
    spawn: list[Spawn | Wait] = []
    for i, item in enumerate(items):
        key = f"approve-{ctx.node_id[:12]}-{i}"
        waits[_call_id(item)] = key
        data = {"tool": item.name, "arguments": _arguments(item), "agent": item.agent.name}
        spawn.append(Wait(key, timeout=timeout, data=data, schema=APPROVAL_SCHEMA))
    spawn.append(Spawn("run", {"approvals": waits}, key="resume", after=list(waits.values())))
    return spawn


async def answer(ctx: Context, state: RunState[Any, Any], waits: dict[str, str]) -> None:
    """Approve or reject each interrupted call of `state` as its wait was answered."""
    for item in state.get_interruptions():
        key = waits.get(_call_id(item))
        if key is None:
            continue
        event = await ctx.event(key)
        if event.timed_out:
            state.reject(item, rejection_message="not run: approval timed out")
        elif not event.payload["approve"]:
            reason = event.payload.get("reason") or "no reason given"
            state.reject(item, rejection_message=f"not run: rejected ({reason})")
        else:
            state.approve(item)


class DurableRunner:
    """An Agents SDK agent as a tether agent: a Registry whose `run` node runs `Runner.run`.

    The node's input is `{"input": str}`; its output `{"content": final output as JSON,
    "last_agent": name}` (the items it produced are in its recorded model responses).
    Submit runs to workers by the registry's name (the agent's name unless `name=` says
    otherwise).

    `stream=True` runs `Runner.run_streamed`: the model's text reaches tether's live token
    stream (`runtime.events.on_event`, `?tokens=1`) as it comes; each model call is still
    recorded whole. Tool calls that need approval (`needs_approval=`) park the run on one
    durable wait per call, answered with `{"approve": bool, "reason"?}` (`tether signal`,
    the API, the page); `approval_timeout` (seconds) rejects unanswered ones.
    """

    def __init__(
        self,
        agent: Agent[Any],
        *,
        name: str | None = None,
        model_provider: ModelProvider | None = None,
        max_turns: int = 10,
        retry: Retry | None = None,
        timeout: float | None = None,
        rate_key: str | None = None,
        rate_limits: Sequence[RateLimit] = (),
        stream: bool = False,
        approval_timeout: float | None = None,
    ) -> None:
        self.stream = stream
        self.approval_timeout = approval_timeout
        # Model calls take from a shared rate limit, as tether's agents' do: each model's
        # ("openai:" + its name), or `rate_key`'s; `rate_limits` are defaults in code.
        self.agent = durable_agent(
            agent, model_provider or MultiProvider(), rate_key=rate_key, rate_limits=rate_limits
        )
        self.max_turns = max_turns
        self.registry = Registry(name or agent.name, entry="run")
        self.registry.add("run", self._run_node, retry=retry, timeout=timeout)

    async def _run_node(self, ctx: Context, node: Node) -> NodeResult:
        spec = node.input if isinstance(node.input, dict) else {"input": node.input}
        start: str | RunState[Any, Any] = spec.get("input", "")
        if "approvals" in spec:  # a continuation: from the state the asking node recorded
            (first_wait,) = ctx.parents_of(ctx.node_id)[:1]
            asking = ctx.parents_of(first_wait)[0] if ctx.kind_of(first_wait) == WAIT_KIND else ""
            recorded = await ctx.output_of(asking)
            start = await RunState.from_json(self.agent, recorded["state"])
            await answer(ctx, start, spec["approvals"])
        with node_scope(ctx):
            if self.stream:
                streamed = Runner.run_streamed(self.agent, start, max_turns=self.max_turns)
                await _relay_tokens(ctx, streamed)
                result: Any = streamed
            else:
                result = await Runner.run(self.agent, start, max_turns=self.max_turns)
        if result.interruptions:  # tool calls awaiting approval: park on durable waits
            state = result.to_state().to_json()
            asked = ask(ctx, result.interruptions, timeout=self.approval_timeout)
            return NodeResult({"state": state}, spawn=asked)
        output = {
            "content": to_jsonable_python(result.final_output),
            "last_agent": result.last_agent.name,
        }
        return NodeResult(output, is_result=True)

    async def run(
        self,
        input: str,
        *,
        runtime: Runtime,
        run_id: str | None = None,
        budget: Budget | None = None,
    ) -> Outcome:
        """Run the agent durably in this process until it finishes, fails or pauses."""
        return await runtime.start(self.registry, {"input": input}, run_id=run_id, budget=budget)

    async def submit(
        self,
        input: str,
        *,
        runtime: Runtime,
        run_id: str | None = None,
        budget: Budget | None = None,
    ) -> str:
        """Queue a run for any worker that has this agent; return its id."""
        return await runtime.submit(self.registry, {"input": input}, run_id=run_id, budget=budget)


async def _relay_tokens(ctx: Context, result: RunResultStreaming) -> None:
    """Send a streamed run's text to tether's live token stream (never logged)."""
    async for event in result.stream_events():
        data = getattr(event, "data", None)
        text = getattr(data, "delta", "") if event.type == "raw_response_event" else ""
        if getattr(data, "type", "") == "response.output_text.delta" and text:
            ctx.emit({"type": "token", "text": text})


__all__ = ["DurableModel", "DurableRunner", "durable_agent", "rate_key_for"]
