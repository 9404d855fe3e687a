"""An LLM agent as a graph: a model turn is a node, each tool call a successor, the next a join."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tether.agent.conversation import Conversations
from tether.agent.mcp import MCPServer, tool_names
from tether.agent.messages import Message, ToolSpec, tool_result, turn_messages
from tether.agent.pricing import cost_of
from tether.agent.providers import Provider, check_model, key_variable, provider_for, split_model
from tether.agent.ratelimits import RateGate, estimate_tokens
from tether.agent.retries import with_retries
from tether.agent.tools import Tool, ToolArgumentsError
from tether.engine.context import Context, Handler
from tether.engine.executor import Outcome
from tether.engine.registry import CompatibleFn, Registry, version_hash
from tether.engine.runtime import Runtime
from tether.foundation import metrics, tracing
from tether.foundation.core import Budget, Node, NodeResult, Spawn, Usage, Wait
from tether.foundation.ids import child_id
from tether.model.graph import Graph
from tether.model.values import ValueCodec
from tether.model.waits import WAIT_KIND
from tether.store.rates import RateLimit

# What answers a tool call's approval: approve, reject with a reason, or approve with edited
# arguments (validated again before the tool runs).
APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean"},
        "reason": {"type": "string"},
        "arguments": {"type": "object"},
    },
    "required": ["approve"],
}

SUBAGENT_SCHEMA = {
    "type": "object",
    "properties": {"task": {"type": "string", "description": "what the sub-agent should do"}},
    "required": ["task"],
    "additionalProperties": False,
}


def prompt_of(run_input: Any) -> str:
    """An agent run's input is its prompt: a string, or `{"prompt": "..."}`."""
    if isinstance(run_input, str):
        return run_input
    prompt = run_input.get("prompt") if isinstance(run_input, dict) else None
    if isinstance(prompt, str):
        return prompt
    raise ValueError(
        f'an agent run takes a prompt: a string or {{"prompt": "..."}}, not {run_input!r:.80}'
    )


class Agent:
    """A model, a system prompt, tools (functions or other agents) and a budget.

    `Agent.registry` is an ordinary tether Registry with three node kinds: `turn` (one
    model call), `tool` (one tool call) and `agent` (a sub-agent, run as a child run).
    """

    def __init__(
        self,
        name: str,
        *,
        model: str,
        system: str = "",
        tools: Sequence[Tool | Agent | MCPServer] = (),
        budget: Budget | None = None,
        description: str = "",
        tool_name: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        model_attempts: int = 6,
        model_backoff: float = 0.5,
        version: str | None = None,
        compatible: Iterable[str] | CompatibleFn | None = None,
        rate_key: str | None = None,
        rate_limits: Sequence[RateLimit] = (),
        max_running: int | None = None,
        max_running_per_key: int | None = None,
        per_run_keys: bool = False,
    ) -> None:
        self.name = name
        # What a parent agent's model calls this agent by (names are global, tool names local).
        self.tool_name = tool_name or name
        self.model = model
        self.system = system
        self.budget = budget
        self.description = description or f"Delegate a task to the {name} agent."
        self.base_url = base_url
        self.api_key = api_key
        # Calls to the model on transient errors (connection refused, timeouts, 5xx, 429):
        # attempts, the first wait between them (doubling; a Retry-After wins), then the run
        # pauses (ModelUnavailable) until `tether resume`.
        self.model_attempts = model_attempts
        self.model_backoff = model_backoff
        # The shared rate limit its model calls take from (default: the model, e.g.
        # "openai:gpt-4.1"; name an API key to share one limit across models), and limits
        # this code brings, stored unless one is set already (`tether limits set --model`).
        self.rate_gate = RateGate(rate_key or model, rate_limits)
        self.tools: dict[str, Tool] = {}
        self.subagents: dict[str, Agent] = {}
        self.mcp_servers: list[MCPServer] = []
        for t in tools:
            if isinstance(t, Agent):
                self.subagents[t.tool_name] = t
            elif isinstance(t, MCPServer):
                self.mcp_servers.append(t)
            else:
                self.tools[t.name] = t
        clash = set(self.tools) & set(self.subagents)
        if clash:
            raise ValueError(f"agent {name!r}: tool and sub-agent share names {sorted(clash)}")
        self._provider: Provider | None = None
        # The prompt last built per run: the next turn's extends it instead of a walk.
        self._conversations = Conversations()
        self._provider_loop: asyncio.AbstractEventLoop | None = None
        if version is None:  # by default, the tools' and sub-agents' names and arguments
            version = version_hash(
                {
                    "kinds": ["turn"],
                    "tools": {n: t.arguments.model_json_schema() for n, t in self.tools.items()},
                    "subagents": sorted(self.subagents),
                }
            )
        # Concurrency limits this code brings (`Registry`'s; a limit set by hand wins).
        self.registry = Registry(
            name,
            entry="turn",
            version=version,
            compatible=compatible,
            max_running=max_running,
            max_running_per_key=max_running_per_key,
            per_run_keys=per_run_keys,
        )
        self.registry.add("turn", self._turn)
        # One kind per tool, so each keeps its own retry policy and the graph names it.
        for t in self.tools.values():
            self.registry.add(
                f"tool:{t.name}", self._tool_handler(t), retry=t.retry, fallback=self._tool_failed
            )
        for sub in self.subagents.values():
            self.registry.add(f"agent:{sub.tool_name}", self._subagent_handler(sub))
        # One kind per MCP server: its tools are listed at run time, the policy is the server's.
        for server in self.mcp_servers:
            self.registry.add(
                f"mcp:{server.name}",
                self._mcp_handler(server),
                retry=server.retry,
                fallback=self._tool_failed,
            )
        self.registry.add("tool", self._unknown_tool)
        # Its model (and its sub-agents') checked before a run is recorded.
        self.registry.add_check(lambda here: self.check_model(key=here))

    # -- running -------------------------------------------------------------------

    async def run(self, runtime: Runtime, prompt: str, *, budget: Budget | None = None) -> Outcome:
        """Start a run of this agent on `prompt` and execute it."""
        return await runtime.start(self.registry, {"prompt": prompt}, budget=budget or self.budget)

    def check_model(self, *, key: bool = True) -> None:
        """ModelNotConfigured if this agent's model or a sub-agent's cannot be called as
        configured: an unknown provider; with `key`, no API key for a provider's own
        endpoint (this process calls the model; a queued run's worker has its own settings)."""
        if key:
            check_model(self.model, base_url=self.base_url, api_key=self.api_key)
        else:
            split_model(self.model)
        for sub in self.subagents.values():
            sub.check_model(key=key)

    @property
    def provider(self) -> Provider:
        """The SDK client, made on first use (one per event loop: clients bind to their loop)."""
        loop = asyncio.get_running_loop()
        if self._provider is None or self._provider_loop is not loop:
            self._provider = provider_for(self.model, base_url=self.base_url, api_key=self.api_key)
            self._provider_loop = loop
        return self._provider

    async def aclose(self) -> None:
        """Close the SDK clients of this agent and its sub-agents."""
        if self._provider is not None:
            await self._provider.close()
            self._provider = None
        for sub in self.subagents.values():
            await sub.aclose()
        for server in self.mcp_servers:
            await server.aclose()

    async def __aenter__(self) -> Agent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def tool_specs(self) -> list[ToolSpec]:
        specs = [ToolSpec(t.name, t.description, t.schema) for t in self.tools.values()]
        specs += [
            ToolSpec(a.tool_name, a.description, SUBAGENT_SCHEMA) for a in self.subagents.values()
        ]
        return specs

    # -- the conversation, derived from the graph ------------------------------------

    async def history(self, ctx: Context) -> list[Message]:
        """The messages before this turn, derived from its ancestors (never re-stored).

        A turn's parents are the tool calls of the previous turn, whose parent is that turn;
        tool results are ordered by call index, so the prompt never depends on timing. The
        previous turn's prompt is usually kept (`Conversations`): this turn's is that plus
        the previous reply and its tool results. Otherwise the ancestors are walked.
        """
        parents = tuple(ctx.node.parent_ids)
        if parents:
            previous_turn = _turn_of(ctx.parents_of, ctx.kind_of, parents[0])
            before = self._conversations.prompt_of(ctx.run_id, previous_turn)
            if before is not None:
                results = [await ctx.output_of(t) for t in parents]
                messages = [*before, *turn_messages(await ctx.output_of(previous_turn), results)]
                self._conversations.keep(ctx.run_id, ctx.node_id, messages)
                return messages
        messages = await self._walk_history(ctx)
        self._conversations.keep(ctx.run_id, ctx.node_id, messages)
        return messages

    async def _walk_history(self, ctx: Context) -> list[Message]:
        """The messages before this turn, by walking all its ancestors."""
        chain: list[tuple[str, tuple[str, ...]]] = []
        parents = tuple(ctx.node.parent_ids)
        while parents:
            previous_turn = _turn_of(ctx.parents_of, ctx.kind_of, parents[0])
            chain.append((previous_turn, parents))
            parents = ctx.parents_of(previous_turn)
        messages: list[Message] = [{"role": "user", "content": prompt_of(await ctx.run_input())}]
        for turn_id, tool_ids in reversed(chain):
            results = [await ctx.output_of(t) for t in tool_ids]
            messages += turn_messages(await ctx.output_of(turn_id), results)
        return messages

    # -- node handlers ----------------------------------------------------------------

    async def _turn(self, ctx: Context, node: Node) -> NodeResult:
        messages = await self.history(ctx)
        specs = self.tool_specs()
        for server in self.mcp_servers:  # listed once per worker, then cached
            specs += [s for s in await server.tools() if s.name not in self.tools]

        def on_token(text: str) -> None:
            ctx.emit({"type": "token", "text": text})

        traces = tracing.active
        span = (
            traces.model_call(ctx.run_id, node.node_id, node.attempt, self.model)
            if traces is not None
            else contextlib.nullcontext(None)
        )
        with span as traced:
            # A model this process cannot call (no key here, a provider unknown to this
            # code) pauses the run, naming what to set: ModelNotConfigured.
            check_model(self.model, base_url=self.base_url, api_key=self.api_key)
            # Made before the limit is taken: a new SDK client takes a while to set up, and
            # the call should reach the provider as soon as the limit lets it start.
            provider = self.provider
            reply = await with_retries(
                lambda: self.rate_gate.call(
                    ctx,
                    lambda: estimate_tokens(self.system, messages, specs),
                    provider,
                    lambda: provider.complete(self.system, messages, specs, on_token),
                ),
                attempts=self.model_attempts,
                backoff=self.model_backoff,
                on_retry=ctx.emit,
                model=self.model,
                key_variable=None if self.api_key else key_variable(self.model),
            )
            cost = cost_of(self.model, reply.tokens_in, reply.tokens_out)
            if traced is not None:
                traced(reply.tokens_in, reply.tokens_out, cost)
        if (m := metrics.active) is not None:
            m.model_call(self.model, reply.tokens_in, reply.tokens_out, cost)
        usage = Usage(reply.tokens_in, reply.tokens_out, cost, model_calls=1)
        message = reply.message()
        if not reply.tool_calls:
            self._conversations.forget(ctx.run_id)  # no turn follows this one
            return NodeResult(message, usage=usage, is_result=True)
        keys = [f"call{i}" for i in range(len(reply.tool_calls))]
        spawn: list[Spawn | Wait] = []
        for i, (k, c) in enumerate(zip(keys, reply.tool_calls, strict=True)):
            wait = self._approval_wait(ctx, i, c.name, c.arguments)
            if wait is None:
                spawn.append(Spawn(self._kind_of(c.name), None, key=k))  # call i: its key
            else:
                spawn.append(wait)
                spawn.append(
                    Spawn(self._kind_of(c.name), {"call": i, "approval": wait.key}, key=k,
                          after=[wait.key])
                )  # fmt: skip
        spawn.append(Spawn("turn", None, key="next", after=keys))
        return NodeResult(message, spawn=spawn, usage=usage)

    def _approval_wait(self, ctx: Context, i: int, name: str, arguments: Any) -> Wait | None:
        """The wait a call needs before it runs, or None (no approval, or bad arguments:
        those go back to the model without asking anyone)."""
        tool = self.tools.get(name)
        if tool is None or not tool.approval:
            return None
        try:
            validated = tool.validate(arguments)
        except ToolArgumentsError:
            return None
        if not tool.needs_approval(validated):
            return None
        data = {"tool": name, "arguments": json.loads(json.dumps(validated, default=str))}
        return Wait(
            f"approve-{ctx.node_id[:12]}-{i}",
            timeout=tool.approval_timeout,
            data=data,
            schema=APPROVAL_SCHEMA,
        )

    async def _call_of(self, ctx: Context, node: Node) -> dict[str, Any]:
        turn_id = _turn_of(ctx.parents_of, ctx.kind_of, node.node_id)
        calls = (await ctx.output_of(turn_id))["tool_calls"]
        if node.input is not None:  # an approval's, or recorded before keys told the call
            index: int = node.input["call"]
        else:  # call i is the turn's successor with key f"call{i}" (ids are stable)
            index = next(
                i for i in range(len(calls)) if child_id(turn_id, f"call{i}") == node.node_id
            )
        call: dict[str, Any] = calls[index]
        return call

    @staticmethod
    def _result(call: dict[str, Any], content: Any, *, is_error: bool = False) -> Message | str:
        """The result of `call` as its node records it (the call's id and name are the
        turn's: `tool_message_of` puts them back)."""
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        return tool_result(text, is_error=is_error)

    def _kind_of(self, name: str) -> str:
        if name in self.tools:
            return f"tool:{name}"
        if name in self.subagents:
            return f"agent:{name}"
        server = tool_names(self.mcp_servers).get(name)
        if server is not None:
            return f"mcp:{server.name}"
        return "tool"  # a tool the model made up: answered with an error, not a crash

    async def _unknown_tool(self, ctx: Context, node: Node) -> Message | str:
        call = await self._call_of(ctx, node)
        known = ", ".join(sorted([*self.tools, *self.subagents])) or "none"
        missing = f"error: there is no tool {call['name']!r} (tools: {known})"
        return self._result(call, missing, is_error=True)

    def _tool_handler(self, tool: Tool) -> Handler:
        async def run_tool(ctx: Context, node: Node) -> Message | str:
            call = await self._call_of(ctx, node)
            given = call["arguments"]
            if node.input is not None and "approval" in node.input:
                event = await ctx.event(node.input["approval"])
                if event.timed_out:
                    return self._result(call, "not run: approval timed out", is_error=True)
                if not event.payload["approve"]:
                    reason = event.payload.get("reason") or "no reason given"
                    return self._result(call, f"not run: rejected ({reason})", is_error=True)
                given = event.payload.get("arguments", given)
            try:
                arguments = tool.validate(given)
            except ToolArgumentsError as exc:
                # Bad arguments go back to the model as the tool's result, to try again.
                return self._result(call, f"error: {exc}", is_error=True)
            call_fn = tool.fn(ctx, **arguments) if tool.takes_ctx else tool.fn(**arguments)
            return self._result(call, await call_fn)

        return run_tool

    def _mcp_handler(self, server: MCPServer) -> Handler:
        async def run_mcp_tool(ctx: Context, node: Node) -> Message | str:
            call = await self._call_of(ctx, node)
            text, is_error = await server.call(call["name"], call["arguments"])
            return self._result(call, text, is_error=is_error)

        return run_mcp_tool

    async def _tool_failed(self, ctx: Context, node: Node, exc: BaseException) -> Message | str:
        """A tool that raised after its last attempt: the model reads the error, the run goes on."""
        call = await self._call_of(ctx, node)
        return self._result(call, f"error: {type(exc).__name__}: {exc}", is_error=True)

    def _subagent_handler(self, sub: Agent) -> Handler:
        async def run_subagent(ctx: Context, node: Node) -> Message | str:
            call = await self._call_of(ctx, node)
            args = call["arguments"]
            task = args.get("task") if isinstance(args, dict) else None
            if not isinstance(task, str):
                return self._result(
                    call, "error: a sub-agent call needs a string `task`", is_error=True
                )
            answer = await ctx.run_child(sub.registry, {"prompt": task}, budget=sub.budget)
            return self._result(call, answer["content"])

        return run_subagent

    async def transcript(self, runtime: Runtime, run_id: str) -> list[Message]:
        """The whole conversation of a finished run, rebuilt from its log."""
        outcome = await runtime.outcome(run_id)
        return await conversation_of(outcome.graph, runtime.new_codec())


async def conversation_of(graph: Graph, codec: ValueCodec) -> list[Message]:
    """The whole conversation of a finished agent run's graph, messages whole (whether its
    nodes recorded them whole or slim)."""
    if graph.result_node is None:
        raise ValueError(f"run {graph.run_id} has no final answer yet ({graph.status})")

    def parents_of(node_id: str) -> tuple[str, ...]:
        return graph.parents_of(node_id)

    def kind_of(node_id: str) -> str:
        return graph.spec(node_id).kind

    async def output_of(node_id: str) -> Any:
        completed = graph.completed(node_id)
        assert completed is not None
        return await codec.decode(completed.output)

    # (turn, the tool calls it made) from the answer back to the first turn.
    chain: list[tuple[str, tuple[str, ...]]] = []
    nid: str | None = graph.result_node
    calls: tuple[str, ...] = ()
    while nid is not None:
        chain.append((nid, calls))
        calls = parents_of(nid)
        nid = _turn_of(parents_of, kind_of, calls[0]) if calls else None
    started = graph.started
    assert started is not None
    messages: list[Message] = [
        {"role": "user", "content": prompt_of(await codec.decode(started.input))}
    ]
    for turn_id, tool_ids in reversed(chain):
        results = [await output_of(t) for t in tool_ids]
        messages += turn_messages(await output_of(turn_id), results)
    return messages


def _turn_of(
    parents_of: Callable[[str], tuple[str, ...]], kind_of: Callable[[str], str], tool_id: str
) -> str:
    """The turn that called a tool: its parent, or its approval wait's parent."""
    parent = parents_of(tool_id)[0]
    return parents_of(parent)[0] if kind_of(parent) == WAIT_KIND else parent
