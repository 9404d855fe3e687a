"""The OpenAI Agents SDK on tether: model calls and tool calls become journaled steps.

`DurableRunner(agent)` turns an `agents.Agent` (with its handoffs) into a tether agent
whose one node runs `Runner.run`. Each agent is cloned with its model wrapped so every
model call is `ctx.step(...)`, and its function tools wrapped so every call is a step too;
a handoff is decided by a recorded model response, so a resumed run hands off the same way
without asking again. The run loop is what is replayed. Tracing is the SDK's own and stays
as configured.

    runner = DurableRunner(agent)
    outcome = await runner.run("Where is my order?", runtime=Runtime(store))
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Any

from agents import Agent, FunctionTool, Model, ModelProvider, MultiProvider, Runner
from agents.items import ModelResponse
from pydantic import TypeAdapter
from pydantic_core import to_jsonable_python

from tether.agent.pricing import cost_of
from tether.agent.ratelimits import RateGate
from tether.engine.context import Context
from tether.engine.executor import Outcome
from tether.engine.registry import Registry
from tether.engine.runtime import Runtime
from tether.foundation.core import Budget, Node, NodeResult, Retry, StepResult, Usage
from tether.integrations.scope import current_scope, node_scope
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
        if current_scope() is not None:
            raise TypeError(
                "a streamed Runner run is not journaled: use DurableRunner.run, whose model "
                "calls are recorded whole"
            )
        return self.inner.stream_response(*args, **kwargs)


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
        else h
        for h in agent.handoffs
    ]
    return clone


class DurableRunner:
    """An Agents SDK agent as a tether agent: a Registry whose `run` node runs `Runner.run`.

    The node's input is `{"input": str}`; its output `{"content": final output as JSON,
    "last_agent": name}`. Submit runs to workers by the registry's name (the agent's name
    unless `name=` says otherwise).
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
    ) -> None:
        # Model calls take from a shared rate limit, as tether's agents' do: each model's
        # ("openai:" + its name), or `rate_key`'s; `rate_limits` are defaults in code.
        self.agent = durable_agent(
            agent, model_provider or MultiProvider(), rate_key=rate_key, rate_limits=rate_limits
        )
        self.max_turns = max_turns
        self.registry = Registry(name or agent.name, entry="run")
        self.registry.add("run", self._run_node, retry=retry, timeout=timeout)

    async def _run_node(self, ctx: Context, node: Node) -> NodeResult:
        text = node.input["input"] if isinstance(node.input, dict) else node.input
        with node_scope(ctx):
            result = await Runner.run(self.agent, text, max_turns=self.max_turns)
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


__all__ = ["DurableModel", "DurableRunner", "durable_agent", "rate_key_for"]
