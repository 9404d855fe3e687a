"""Tools: plain `async def` functions whose JSON schema comes from their type hints."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, get_type_hints, overload

import pydantic

from tether.engine.context import Context
from tether.foundation.core import Retry
from tether.foundation.errors import TetherError


class ToolArgumentsError(TetherError):
    """The model's arguments for a tool do not match its signature."""


# Whether a call (its validated arguments) needs a person's approval before it runs.
Approval = bool | Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class Tool:
    """A function the model may call. Build one with `@tool` or `Tool.of(fn)`."""

    name: str
    description: str
    fn: Callable[..., Awaitable[Any]]
    arguments: type[pydantic.BaseModel]
    takes_ctx: bool = False
    retry: Retry = field(default_factory=Retry)
    # A call waits for approval (an event) before it runs: always, or when this says so.
    approval: Approval = False
    # Seconds an approval may take; past them the call is answered as not approved.
    approval_timeout: float | None = None

    @classmethod
    def of(
        cls,
        fn: Callable[..., Awaitable[Any]],
        *,
        name: str | None = None,
        description: str | None = None,
        retry: Retry | None = None,
        approval: Approval = False,
        approval_timeout: float | None = None,
    ) -> Tool:
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"tool {fn.__name__!r} must be an `async def` function")
        hints = get_type_hints(fn)
        fields: dict[str, Any] = {}
        takes_ctx = False
        for i, (pname, param) in enumerate(inspect.signature(fn).parameters.items()):
            annotation = hints.get(pname, Any)
            if i == 0 and (annotation is Context or pname == "ctx"):
                takes_ctx = True
                continue
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                raise TypeError(f"tool {fn.__name__!r}: *args/**kwargs cannot be described")
            default = ... if param.default is param.empty else param.default
            fields[pname] = (annotation, default)
        model = pydantic.create_model(
            f"{fn.__name__}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid"),
            **fields,
        )
        doc = inspect.getdoc(fn) or ""
        return cls(
            name=name or fn.__name__,
            description=description or doc.split("\n\n")[0].strip() or fn.__name__,
            fn=fn,
            arguments=model,
            takes_ctx=takes_ctx,
            retry=retry or Retry(),
            approval=approval,
            approval_timeout=approval_timeout,
        )

    def needs_approval(self, arguments: dict[str, Any]) -> bool:
        """Whether this call (validated arguments) waits for approval before it runs."""
        return self.approval(arguments) if callable(self.approval) else bool(self.approval)

    @property
    def schema(self) -> dict[str, Any]:
        """JSON schema of the arguments (what providers call `parameters`/`input_schema`)."""
        schema = self.arguments.model_json_schema()
        schema.pop("title", None)
        return schema

    def validate(self, arguments: Any) -> dict[str, Any]:
        """Check the model's arguments; raise ToolArgumentsError saying what is wrong."""
        try:
            parsed = self.arguments.model_validate(arguments)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ToolArgumentsError(f"invalid arguments for {self.name}: {problems}") from None
        return {k: getattr(parsed, k) for k in type(parsed).model_fields}

    async def call(self, ctx: Context, arguments: dict[str, Any]) -> Any:
        kwargs = self.validate(arguments)
        if self.takes_ctx:
            return await self.fn(ctx, **kwargs)
        return await self.fn(**kwargs)


ToolFn = Callable[..., Awaitable[Any]]


@overload
def tool(fn: ToolFn, /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    retry: Retry | None = None,
    approval: Approval = False,
    approval_timeout: float | None = None,
) -> Callable[[ToolFn], Tool]: ...


def tool(
    fn: ToolFn | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    retry: Retry | None = None,
    approval: Approval = False,
    approval_timeout: float | None = None,
) -> Tool | Callable[[ToolFn], Tool]:
    """Decorator: `@tool` or `@tool(name=..., retry=Retry(3))` turns a function into a Tool.

    `approval=True` (or a predicate on the validated arguments) makes each call wait for a
    person: the run parks on a wait whose data shows the tool and its arguments; the answer
    `{"approve": true}` runs it, `{"approve": false, "reason": "..."}` sends the reason back
    to the model as the tool's result, `{"approve": true, "arguments": {...}}` runs it with
    edited arguments (validated again).
    """

    def wrap(f: ToolFn) -> Tool:
        return Tool.of(
            f,
            name=name,
            description=description,
            retry=retry,
            approval=approval,
            approval_timeout=approval_timeout,
        )

    return wrap(fn) if fn is not None else wrap
