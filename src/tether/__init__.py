"""tether: a durable runtime for long-running LLM agents."""

from tether.context import Context
from tether.core import (
    Budget,
    Fallback,
    Handler,
    Node,
    NodeResult,
    Retry,
    Spawn,
    StepResult,
    Usage,
)
from tether.errors import (
    ChildFailed,
    ChildPaused,
    ConflictingRecord,
    CorruptRecord,
    InvalidSpawn,
    NodeTimeout,
    NonDeterministicStep,
    OutputNotSerializable,
    RecordTooLarge,
    RunExists,
    RunMustPause,
    RunNotResumable,
    StaleEpoch,
    StepBudgetExhausted,
    StepTimeout,
    StoreError,
    StoreUnavailable,
    TetherError,
    UnknownAgent,
    UnknownNodeKind,
    UnknownRun,
)
from tether.executor import Outcome
from tether.graph import Graph
from tether.registry import Registry, resolve_agent
from tether.runtime import Runtime
from tether.store import RunInfo, Status, Store, store_from_url

__version__ = "0.1.0"

__all__ = [
    "Budget",
    "ChildFailed",
    "ChildPaused",
    "ConflictingRecord",
    "Context",
    "CorruptRecord",
    "Fallback",
    "Graph",
    "Handler",
    "InvalidSpawn",
    "Node",
    "NodeResult",
    "NodeTimeout",
    "NonDeterministicStep",
    "Outcome",
    "OutputNotSerializable",
    "RecordTooLarge",
    "Registry",
    "Retry",
    "RunExists",
    "RunInfo",
    "RunMustPause",
    "RunNotResumable",
    "Runtime",
    "Spawn",
    "StaleEpoch",
    "Status",
    "StepBudgetExhausted",
    "StepResult",
    "StepTimeout",
    "Store",
    "StoreError",
    "StoreUnavailable",
    "TetherError",
    "UnknownAgent",
    "UnknownNodeKind",
    "UnknownRun",
    "Usage",
    "resolve_agent",
    "store_from_url",
]
