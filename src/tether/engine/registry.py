"""Registries map node kinds to handlers; an agent is a named registry."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from tether.engine.context import Fallback, Handler
from tether.foundation.core import Retry
from tether.foundation.errors import UnknownAgent, UnknownNodeKind
from tether.foundation.inputs import InputShape
from tether.store.limits import ConcurrencyLimit

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
    # The declared shape of this kind's node inputs (checked before a deploy moves a run).
    input: InputShape | None = None


@dataclass(frozen=True, slots=True)
class PendingNode:
    """A node of a run still to execute: what a `compatible=` function inspects."""

    node_id: str
    kind: str
    input: Any


@dataclass(frozen=True, slots=True)
class PendingRun:
    """A run on another version of an agent's code, as a `compatible=` function sees it."""

    run_id: str
    agent: str
    version: str
    nodes: tuple[PendingNode, ...]

    @property
    def kinds(self) -> list[str]:
        """The pending node kinds, each once, in spawn order."""
        return list(dict.fromkeys(n.kind for n in self.nodes))


# Whether this code can continue a run that started on another version (`compatible=`).
CompatibleFn = Callable[[PendingRun], bool]


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
        compatible: Iterable[str] | CompatibleFn | None = None,
        max_running: int | None = None,
        max_running_per_key: int | None = None,
        per_run_keys: bool = False,
    ) -> None:
        if version is not None and not version.strip():
            raise ValueError(f"agent {name!r}: version must not be empty")
        self.name = name
        # Each run gets its own data key under the key ring, so that it can be shredded
        # (`tether runs delete --shred`); needs a key ring (TETHER_KEYS).
        self.per_run_keys = per_run_keys
        # Concurrency limits this code brings (`tether.store.limits`): of the agent's runs as
        # a whole, and of each concurrency key's; stored when its runs are created unless
        # one is set already (`tether limits set --agent` wins). Checked here (BadLimit).
        self.limit_defaults = tuple(
            ConcurrencyLimit(name, n, each_key=each)
            for n, each in ((max_running, False), (max_running_per_key, True))
            if n is not None
        )
        self._version = version
        # Older versions whose runs this code may continue: listed, or judged per run by a
        # function. Either way a run moves only if this code also has a handler for every
        # pending kind and its pending inputs fit (`tether.engine.continuity.check_run`).
        self.compatible_fn: CompatibleFn | None = None
        self.compatible_versions: tuple[str, ...] = ()
        if callable(compatible):
            self.compatible_fn = compatible
        elif compatible is not None:
            if isinstance(compatible, str):
                raise TypeError(f"agent {name!r}: compatible= takes a list of versions")
            self.compatible_versions = tuple(compatible)
        self.entry = entry
        # The shape runs' inputs must have (a pydantic model or a JSON schema), checked
        # before anything is recorded; `default_input` stands in for an input not given.
        self.input = InputShape(input) if input is not None else None
        self.default_input = default_input
        self._handlers: dict[str, HandlerSpec] = {}
        # What must hold before a run of this agent is recorded (`add_check`).
        self._checks: list[Callable[[bool], None]] = []
        # What its runs need up while they execute in this process, given the command's
        # options (`model`, `speed`): entered by `tether resume` and `tether retry` around
        # the run. The demo's scripted model server comes in so (`services`).
        self.services_fn: Callable[..., contextlib.AbstractAsyncContextManager[object]] | None = (
            None
        )
        _REGISTRIES[name] = self

    def services(self, **options: Any) -> contextlib.AbstractAsyncContextManager[object]:
        """What a run of this agent needs up while it executes here (nothing by default)."""
        if self.services_fn is None:
            return contextlib.nullcontext()
        return self.services_fn(**options)

    def node(
        self,
        kind: str,
        *,
        retry: Retry | None = None,
        timeout: float | None = None,
        fallback: Fallback | None = None,
        input: Any = None,
    ) -> Callable[[Handler], Handler]:
        """Register the decorated `async def handler(ctx, node)` for `kind`."""

        def register(fn: Handler) -> Handler:
            self.add(kind, fn, retry=retry, timeout=timeout, fallback=fallback, input=input)
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
        input: Any = None,
    ) -> None:
        """Register `fn` for `kind`; `input` (a pydantic model or a JSON schema) declares the
        shape of its nodes' inputs, checked before a run is moved to this code."""
        if kind in self._handlers:
            raise ValueError(f"agent {self.name!r} already has a handler for {kind!r}")
        shape = InputShape(input) if input is not None else None
        self._handlers[kind] = HandlerSpec(kind, fn, retry or Retry(), timeout, fallback, shape)
        if self.entry is None:
            self.entry = kind

    def check_input(self, value: Any) -> Any:
        """The input a run of this agent records: `value` (or the default input, for None)
        checked against the declared shape; BadInput if it does not fit."""
        if value is None and self.default_input is not NO_DEFAULT:
            value = self.default_input
        return value if self.input is None else self.input.check(self.name, value)

    def add_check(self, check: Callable[[bool], None]) -> None:
        """Call `check(here)` before a run of this agent is recorded; it raises (a TetherError
        naming what to fix) to refuse the run, and nothing is recorded. `here` says whether
        this process executes the run (`Runtime.start`), or queues it for a worker that may
        be configured otherwise (`submit`, a schedule): an agent checks its model's API key
        only then, and its provider always."""
        self._checks.append(check)

    def check_ready(self, *, here: bool) -> None:
        """Run the checks `add_check` registered (before a run is recorded)."""
        for check in self._checks:
            check(here)

    def get(self, kind: str) -> HandlerSpec:
        spec = self._handlers.get(kind)
        if spec is None:
            raise UnknownNodeKind(self.name, kind)
        return spec

    def input_shape(self, kind: str) -> InputShape | None:
        """The declared shape of `kind`'s node inputs (the entry kind: the run's input)."""
        spec = self._handlers.get(kind)
        if spec is not None and spec.input is not None:
            return spec.input
        return self.input if kind == self.entry else None

    def accepts(self, version: str) -> bool | None:
        """Whether runs on `version` are this code's: True (its own, or listed compatible),
        False, or None (a `compatible=` function decides run by run)."""
        if version == self.version or version in self.compatible_versions:
            return True
        return None if self.compatible_fn is not None else False

    def missing(self, kinds: Iterable[str]) -> list[str]:
        """The kinds of `kinds` this agent has no handler for."""
        return [k for k in kinds if k not in self._handlers]

    @property
    def version(self) -> str:
        """The declared version, or `h-` and a hash of the handler kinds and the declared
        input schema: code that renames a kind or reshapes its input has another one."""
        if self._version is not None:
            return self._version
        shaped = {k: _schema(h.input) for k, h in self._handlers.items() if h.input is not None}
        shape: dict[str, Any] = {"kinds": sorted(self._handlers), "input": _schema(self.input)}
        if shaped:  # only then: the versions of registries without them stay what they were
            shape["inputs"] = shaped
        return version_hash(shape)

    @property
    def kinds(self) -> list[str]:
        return list(self._handlers)

    def __repr__(self) -> str:
        return f"Registry({self.name!r}, kinds={self.kinds})"


def _schema(shape: InputShape | None) -> Any:
    if shape is None:
        return None
    return shape.schema if shape.schema is not None else shape.model.model_json_schema()


# Packages make their agents findable by name with an entry point in this group, e.g.
# `[project.entry-points."tether.agents"] research = "mypkg.agents:research"`.
ENTRY_POINTS = "tether.agents"


def _entry_point(name: str) -> str | None:
    found = entry_points(group=ENTRY_POINTS, name=name)
    return next((ep.value for ep in found), None)


# Called after resolve_agent imported an agent's module (tether.control.metering declares
# the kinds of the registries that import made).
ON_IMPORT: list[Callable[[], None]] = []


def declared_kinds() -> set[str]:
    """The node kinds of every registry that exists now (`tether.control.metering` takes
    them as the metrics' label values when serving starts, once the served agents are
    imported)."""
    return {kind for registry in list(_REGISTRIES.values()) for kind in registry.kinds}


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
    for hook in list(ON_IMPORT):
        hook()
    found = getattr(module, attr or "agent", None)
    if not isinstance(found, Registry):
        raise UnknownAgent(f"unknown agent {name!r}: {path} is not a tether Registry")
    return found
