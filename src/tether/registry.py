"""Registries map node kinds to handlers; an agent is a named registry."""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from tether.core import Fallback, Handler, Retry
from tether.errors import UnknownAgent, UnknownNodeKind
from tether.inputs import InputShape

_REGISTRIES: dict[str, Registry] = {}
# `Registry(default_input=...)` not given: a run started without input gets None.
NO_DEFAULT: Any = object()


@dataclass(frozen=True, slots=True)
class HandlerSpec:
    kind: str
    fn: Handler
    retry: Retry
    timeout: float | None
    fallback: Fallback | None


def version_hash(shape: Any) -> str:
    """A derived version: `h-` and 12 hex digits of the hash of `shape` as sorted JSON."""
    text = json.dumps(shape, sort_keys=True, default=str)
    return "h-" + hashlib.sha256(text.encode()).hexdigest()[:12]


class Registry:
    """A named set of node handlers; runs of this agent start at its `entry` kind."""

    def __init__(
        self,
        name: str,
        *,
        entry: str | None = None,
        input: Any = None,
        default_input: Any = NO_DEFAULT,
        version: str | None = None,
    ) -> None:
        if version is not None and not version.strip():
            raise ValueError(f"agent {name!r}: version must not be empty")
        self.name = name
        self._version = version
        self.entry = entry
        # The shape runs' inputs must have (a pydantic model or a JSON schema), checked
        # before anything is recorded; `default_input` stands in for an input not given.
        self.input = InputShape(input) if input is not None else None
        self.default_input = default_input
        self._handlers: dict[str, HandlerSpec] = {}
        _REGISTRIES[name] = self

    def node(
        self,
        kind: str,
        *,
        retry: Retry | None = None,
        timeout: float | None = None,
        fallback: Fallback | None = None,
    ) -> Callable[[Handler], Handler]:
        """Register the decorated `async def handler(ctx, node)` for `kind`."""

        def register(fn: Handler) -> Handler:
            self.add(kind, fn, retry=retry, timeout=timeout, fallback=fallback)
            return fn

        return register

    def add(
        self,
        kind: str,
        fn: Handler,
        *,
        retry: Retry | None = None,
        timeout: float | None = None,
        fallback: Fallback | None = None,
    ) -> None:
        if kind in self._handlers:
            raise ValueError(f"agent {self.name!r} already has a handler for {kind!r}")
        self._handlers[kind] = HandlerSpec(kind, fn, retry or Retry(), timeout, fallback)
        if self.entry is None:
            self.entry = kind

    def check_input(self, value: Any) -> Any:
        """The input a run of this agent records: `value` (or the default input, for None)
        checked against the declared shape; BadInput if it does not fit."""
        if value is None and self.default_input is not NO_DEFAULT:
            value = self.default_input
        return value if self.input is None else self.input.check(self.name, value)

    def get(self, kind: str) -> HandlerSpec:
        spec = self._handlers.get(kind)
        if spec is None:
            raise UnknownNodeKind(self.name, kind)
        return spec

    def missing(self, kinds: Iterable[str]) -> list[str]:
        """The kinds of `kinds` this agent has no handler for."""
        return [k for k in kinds if k not in self._handlers]

    @property
    def version(self) -> str:
        """The declared version, or `h-` and a hash of the handler kinds and the declared
        input schema: code that renames a kind or reshapes its input has another one."""
        if self._version is not None:
            return self._version
        shape = self.input
        schema: Any = None
        if shape is not None:
            schema = shape.schema if shape.schema is not None else shape.model.model_json_schema()
        return version_hash({"kinds": sorted(self._handlers), "input": schema})

    @property
    def kinds(self) -> list[str]:
        return list(self._handlers)

    def __repr__(self) -> str:
        return f"Registry({self.name!r}, kinds={self.kinds})"


# Packages make their agents findable by name with an entry point in this group, e.g.
# `[project.entry-points."tether.agents"] research = "mypkg.agents:research"`.
ENTRY_POINTS = "tether.agents"


def _entry_point(name: str) -> str | None:
    found = entry_points(group=ENTRY_POINTS, name=name)
    return next((ep.value for ep in found), None)


def resolve_agent(name: str) -> Registry:
    """Find a registry by name, `module:attribute` import path, or entry point (tether's own
    demo agents are found through theirs, in tether's package metadata, like any package's)."""
    if name in _REGISTRIES:
        return _REGISTRIES[name]
    path = (None if ":" in name else _entry_point(name)) or name
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnknownAgent(
            f"unknown agent {name!r}: not registered and {module_name!r} does not import ({exc})"
        ) from exc
    if name in _REGISTRIES:
        return _REGISTRIES[name]
    found = getattr(module, attr or "agent", None)
    if not isinstance(found, Registry):
        raise UnknownAgent(f"unknown agent {name!r}: {path} is not a tether Registry")
    return found
