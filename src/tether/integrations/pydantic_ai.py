"""pydantic-ai on tether: model requests and tool calls become journaled steps.

`TetherDurability` is a pydantic-ai durability capability built on its public engine
interface (`pydantic_ai.durable_exec`), like its Temporal, DBOS and Prefect ones: inside a
tether node every durable unit (a model request, a tool call, MCP tool listing) runs as
`ctx.step`, so the agent's run loop is the code that is replayed. `TetherAgent` wraps an
agent that has the capability into a tether agent (a Registry) whose one node runs it:

    agent = Agent(model, name="support", capabilities=[TetherDurability()])
    support = TetherAgent(agent)
    outcome = await support.run("Where is my order?", runtime=Runtime(store))

Outside a tether node the capability is transparent and the agent runs as usual.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable, Sequence
from contextvars import ContextVar
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypedDict

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    DurabilityEngineSpec,
    DurableOperationId,
    JournalCallableOperationBackend,
    ModelRequestId,
    RoleBasedOperationConfig,
    ToolsetKind,
    conversation_id_from_run_id,
)
from pydantic_ai.messages import (
    AgentStreamEvent,
    ModelMessagesTypeAdapter,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
)
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.tools import AgentDepsT, RunContext
from pydantic_core import to_jsonable_python

from tether.agent.pricing import cost_of
from tether.agent.ratelimits import RateGate
from tether.engine.context import Context
from tether.engine.executor import Outcome
from tether.engine.registry import Registry
from tether.engine.runtime import Runtime
from tether.foundation.core import Budget, Node, NodeResult, Retry, StepResult, Usage
from tether.integrations import pydantic_ai_approvals as approvals
from tether.integrations.scope import current_scope, node_scope


class StepOptions(TypedDict, total=False):
    """How a pydantic-ai durable unit runs as a step; per tool: `metadata={"tether": {...}}`."""

    retry: Retry
    timeout_s: float


def _usage_of(operation_id: DurableOperationId, payload: object) -> Usage | None:
    """Tokens and cost of a model request, read from its recorded response."""
    if not isinstance(operation_id, ModelRequestId) or not isinstance(payload, dict):
        return None
    usage = payload.get("usage") or {}
    tokens_in = int(usage.get("input_tokens") or 0)
    tokens_out = int(usage.get("output_tokens") or 0)
    model = str(payload.get("model_name") or "")
    return Usage(tokens_in, tokens_out, cost_of(model, tokens_in, tokens_out), model_calls=1)


def _tokens_of(operation_id: DurableOperationId) -> Callable[[object], int]:
    """The tokens a model request's recorded response says it used."""

    def tokens(payload: object) -> int:
        usage = _usage_of(operation_id, payload)
        return 0 if usage is None else usage.tokens_in + usage.tokens_out

    return tokens


if TYPE_CHECKING:
    from pydantic_ai.capabilities import WrapModelRequestHandler
    from pydantic_ai.messages import ModelResponse
    from pydantic_ai.models import ModelRequestContext

# The provider ("openai", "anthropic", ...) of the model request under way: the model's own
# `system`, set around each request by `TetherDurability.wrap_model_request`.
_PROVIDER: ContextVar[str | None] = ContextVar("tether_pydantic_ai_provider", default=None)


def _provider_of(model: object) -> str | None:
    while isinstance(model, WrapperModel):
        model = model.wrapped
    system = getattr(model, "system", None)
    return system if isinstance(system, str) and system else None


def rate_key_of(operation_id: ModelRequestId, provider: str | None) -> str:
    """The shared rate limit a model request takes from by default: the model id the agent
    was given (`openai:gpt-4.1`), else the provider and the model's name, so two providers
    serving one model name never share a meter; the bare name only if neither is known."""
    if operation_id.model_id and ":" in operation_id.model_id:
        return operation_id.model_id
    if provider:
        return f"{provider}:{operation_id.model_name}"
    return operation_id.model_id or operation_id.model_name


class _StepBackend(JournalCallableOperationBackend[StepOptions]):
    """Runs each durable unit as `ctx.step(name, ...)` of the node the run is inside; a
    model request under the shared rate limit of `rate_key` (default: the model's id, or
    its name)."""

    def __init__(self, *, rate_key: str | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.rate_key = rate_key

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: StepOptions,
    ) -> object:
        scope = current_scope()
        if scope is None:  # not in a tether node: run it as it is
            return await body()

        async def unit() -> StepResult:
            if isinstance(operation_id, ModelRequestId):  # under the model's shared limit
                key = self.rate_key or rate_key_of(operation_id, _PROVIDER.get())
                gate = RateGate(key)
                payload = await gate.metered(scope.ctx, body, _tokens_of(operation_id))
            else:
                payload = await body()
            return StepResult(payload, _usage_of(operation_id, payload))

        options = config or {}
        return await scope.ctx.step(
            name, unit, retry=options.get("retry"), timeout_s=options.get("timeout_s")
        )


async def _emit_tokens(run_ctx: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
    """Send a model's streamed text to tether's in-process listeners as `token` events."""
    scope = current_scope()
    async for event in events:
        text = ""
        if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
            text = event.part.content
        elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
            text = event.delta.content_delta
        if scope is not None and text:
            scope.ctx.emit({"type": "token", "text": text})


class TetherDurability(BaseDurabilityCapability[AgentDepsT]):
    """Makes a pydantic-ai agent durable on tether: each model request and tool call is a step.

    `model`, `tool` and `mcp` are the step options (retry policy, timeout) of model
    requests, function tool calls and MCP server calls (model requests take from the shared
    model rate limit of `rate_key`, by default the provider and the model, e.g.
    `openai:gpt-4.1`: `rate_key_of`); a tool's own
    `metadata={"tether": {...}}` overrides them. With `stream_tokens=True` model requests
    stream, and their text reaches tether's ephemeral event stream as it comes (`token`
    events, never logged); pydantic-ai then also journals each tool event as a step of its
    own.
    """

    engine_spec = DurabilityEngineSpec(
        engine_name="tether",
        durable_unit_noun="step",
        durable_container_noun="node",
        # Steps record JSON: the base reduces every value to JSON inside the step.
        codec=JSON_CODEC,
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        toolset_lifecycles={
            "function": "enter-always",
            "mcp": "enter-in-durable-unit",
            "dynamic": "enter-never",
        },
        unsupported_runtime_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        journal_discovery=True,
        sequential_tools_in_durable_context=False,
        tool_config_key="tether",
    )

    def __init__(
        self,
        *,
        name: str | None = None,
        model: StepOptions | None = None,
        tool: StepOptions | None = None,
        mcp: StepOptions | None = None,
        stream_tokens: bool = False,
        rate_key: str | None = None,
    ) -> None:
        super().__init__(name=name, event_stream_handler=_emit_tokens if stream_tokens else None)
        # The shared model rate limit its model requests take from (`tether limits set
        # --model`); default: the provider and the model (e.g. "openai:gpt-4.1").
        self._rate_key = rate_key
        self._model_options: StepOptions = model or {}
        self._tool_options: StepOptions = tool or {}
        self._mcp_options: StepOptions = mcp or {}

    @property
    def in_durable_context(self) -> bool:
        return current_scope() is not None

    def get_default_run_id(self) -> str | None:
        scope = current_scope()
        if scope is None:
            return None
        # Stable across re-runs of the node: its id plus how many agent runs it started.
        return f"{scope.ctx.run_id}:{scope.ctx.node_id}:{next(scope.runs)}"

    def get_default_conversation_id(self, run_id: str) -> str | None:
        return conversation_id_from_run_id(run_id) if self.in_durable_context else None

    async def get_run_start_time(self, run_id: str) -> datetime | None:
        scope = current_scope()
        if scope is None:
            return None
        # Recorded, so a resumed run counts its `timeout=` from when it first started.
        started = await scope.ctx.step(
            f"{self.name}__run_start_time", lambda: datetime.now().astimezone().isoformat()
        )
        return datetime.fromisoformat(started)

    async def wrap_model_request(
        self,
        ctx: RunContext[AgentDepsT],
        *,
        request_context: ModelRequestContext,
        handler: WrapModelRequestHandler,
    ) -> ModelResponse:
        # Which provider serves the request: its model's, before it is wrapped durable.
        token = _PROVIDER.set(_provider_of(request_context.model))
        try:
            return await super().wrap_model_request(
                ctx, request_context=request_context, handler=handler
            )
        finally:
            _PROVIDER.reset(token)

    def get_durable_operation_backend(self) -> _StepBackend:
        return _StepBackend(
            rate_key=self._rate_key,
            agent_name=self.name,
            default_model_id=self.default_model_id,
            config=RoleBasedOperationConfig(
                model=self._model_options,
                event=StepOptions(),
                capability=StepOptions(),
                tool=self._tool_options,
            ),
        )

    def _toolset_base_config(self, kind: ToolsetKind) -> StepOptions:
        return self._mcp_options if kind == "mcp" else self._tool_options


class TetherAgent:
    """A pydantic-ai agent as a tether agent: a Registry whose `run` node runs the agent.

    The node's input is `{"prompt": str}` (one agent run) or `{"prompts": [str, ...]}` (a
    conversation: each prompt continues the history of the ones before, rebuilt on replay
    from the recorded steps, never stored). Its output is JSON: `{"content": <the last
    output>, "outputs": [...]}`. Submit runs to workers by the registry's name.

    Deferred tool calls (give the agent `output_type=[..., DeferredToolRequests]`) wait
    durably: the node records the messages so far and spawns one wait per call, answered
    with `tether signal`, the page or `POST .../signals/{key}`: a tool built with
    `requires_approval=True` waits for `{"approve": bool, "reason"?, "arguments"?}`, a call
    its tool deferred (`raise CallDeferred()`, an `ExternalToolset`) for `{"result": ...}`
    or `{"error": "..."}`. The run parks until all are answered, then a new node goes on
    with the answers. `approval_timeout` (seconds) denies unanswered approvals and fails
    unanswered external calls.
    """

    def __init__(
        self,
        agent: Agent[Any, Any],
        *,
        name: str | None = None,
        retry: Retry | None = None,
        timeout: float | None = None,
        approval_timeout: float | None = None,
    ) -> None:
        if BaseDurabilityCapability.from_agent(agent) is None:
            raise TypeError(
                f"agent {agent.name!r} has no durability capability: build it with "
                "Agent(..., capabilities=[TetherDurability()])"
            )
        self.agent = agent
        self.name = name or agent.name or ""
        if not self.name:
            raise ValueError("a TetherAgent needs a name: pass name= or give the Agent one")
        self.approval_timeout = approval_timeout
        self.registry = Registry(self.name, entry="run")
        self.registry.add("run", self._run_node, retry=retry, timeout=timeout)

    async def _run_node(self, ctx: Context, node: Node) -> NodeResult:
        spec = node.input if isinstance(node.input, dict) else {"prompt": node.input}
        history = await approvals.history_of(ctx)
        answered = None
        if "approvals" in spec:  # a continuation: the answers to the deferred calls
            answered = await approvals.answers(ctx, spec["approvals"], spec.get("calls"))
        prompts: list[str | None] = list(spec.get("prompts") or [spec.get("prompt") or ""])
        if answered is not None:  # first, go on from where the approvals were asked
            prompts = [None, *spec["prompts"]]
        before = len(history or [])
        outputs: list[Any] = []
        with node_scope(ctx):
            for i, prompt in enumerate(prompts):
                result = await self.agent.run(
                    prompt, message_history=history, deferred_tool_results=answered
                )
                answered, history = None, result.all_messages()
                if isinstance(result.output, DeferredToolRequests):
                    rest = [p for p in prompts[i + 1 :] if p is not None]
                    asked = approvals.ask(ctx, result.output, rest, timeout=self.approval_timeout)
                    mine = ModelMessagesTypeAdapter.dump_python(history[before:], mode="json")
                    return NodeResult({"messages": mine, "outputs": outputs}, spawn=asked)
                outputs.append(to_jsonable_python(result.output))
        return NodeResult({"content": outputs[-1], "outputs": outputs}, is_result=True)

    async def run(
        self,
        prompt: str | Sequence[str],
        *,
        runtime: Runtime,
        run_id: str | None = None,
        budget: Budget | None = None,
    ) -> Outcome:
        """Run the agent durably in this process until it finishes, fails or pauses."""
        return await runtime.start(self.registry, _input(prompt), run_id=run_id, budget=budget)

    async def submit(
        self,
        prompt: str | Sequence[str],
        *,
        runtime: Runtime,
        run_id: str | None = None,
        budget: Budget | None = None,
    ) -> str:
        """Queue a run for any worker that has this agent; return its id."""
        return await runtime.submit(self.registry, _input(prompt), run_id=run_id, budget=budget)


def _input(prompt: str | Sequence[str]) -> dict[str, Any]:
    return {"prompt": prompt} if isinstance(prompt, str) else {"prompts": list(prompt)}


__all__ = ["StepOptions", "TetherAgent", "TetherDurability", "node_scope"]
