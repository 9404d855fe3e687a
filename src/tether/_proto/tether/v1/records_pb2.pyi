from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATUS_UNSPECIFIED: _ClassVar[RunStatus]
    RUN_STATUS_SUCCEEDED: _ClassVar[RunStatus]
    RUN_STATUS_FAILED: _ClassVar[RunStatus]
    RUN_STATUS_CANCELLED: _ClassVar[RunStatus]
RUN_STATUS_UNSPECIFIED: RunStatus
RUN_STATUS_SUCCEEDED: RunStatus
RUN_STATUS_FAILED: RunStatus
RUN_STATUS_CANCELLED: RunStatus

class BlobRef(_message.Message):
    __slots__ = ("url", "size", "sha256", "media_type")
    URL_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    url: str
    size: int
    sha256: str
    media_type: str
    def __init__(self, url: _Optional[str] = ..., size: _Optional[int] = ..., sha256: _Optional[str] = ..., media_type: _Optional[str] = ...) -> None: ...

class Value(_message.Message):
    __slots__ = ("json", "blob", "sealed")
    JSON_FIELD_NUMBER: _ClassVar[int]
    BLOB_FIELD_NUMBER: _ClassVar[int]
    SEALED_FIELD_NUMBER: _ClassVar[int]
    json: bytes
    blob: BlobRef
    sealed: Sealed
    def __init__(self, json: _Optional[bytes] = ..., blob: _Optional[_Union[BlobRef, _Mapping]] = ..., sealed: _Optional[_Union[Sealed, _Mapping]] = ...) -> None: ...

class Sealed(_message.Message):
    __slots__ = ("key_id", "nonce", "ciphertext")
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    CIPHERTEXT_FIELD_NUMBER: _ClassVar[int]
    key_id: str
    nonce: bytes
    ciphertext: bytes
    def __init__(self, key_id: _Optional[str] = ..., nonce: _Optional[bytes] = ..., ciphertext: _Optional[bytes] = ...) -> None: ...

class BudgetLimits(_message.Message):
    __slots__ = ("max_nodes", "max_tokens", "max_cost", "max_wall_ms", "max_turns")
    MAX_NODES_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_COST_FIELD_NUMBER: _ClassVar[int]
    MAX_WALL_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_TURNS_FIELD_NUMBER: _ClassVar[int]
    max_nodes: int
    max_tokens: int
    max_cost: float
    max_wall_ms: int
    max_turns: int
    def __init__(self, max_nodes: _Optional[int] = ..., max_tokens: _Optional[int] = ..., max_cost: _Optional[float] = ..., max_wall_ms: _Optional[int] = ..., max_turns: _Optional[int] = ...) -> None: ...

class BudgetUsed(_message.Message):
    __slots__ = ("tokens_in", "tokens_out", "wall_ms", "cost", "model_calls", "rate_wait_ms")
    TOKENS_IN_FIELD_NUMBER: _ClassVar[int]
    TOKENS_OUT_FIELD_NUMBER: _ClassVar[int]
    WALL_MS_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    MODEL_CALLS_FIELD_NUMBER: _ClassVar[int]
    RATE_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    tokens_in: int
    tokens_out: int
    wall_ms: int
    cost: float
    model_calls: int
    rate_wait_ms: int
    def __init__(self, tokens_in: _Optional[int] = ..., tokens_out: _Optional[int] = ..., wall_ms: _Optional[int] = ..., cost: _Optional[float] = ..., model_calls: _Optional[int] = ..., rate_wait_ms: _Optional[int] = ...) -> None: ...

class NodeSpec(_message.Message):
    __slots__ = ("node_id", "kind", "parent_ids", "input", "wait")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PARENT_IDS_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    kind: str
    parent_ids: _containers.RepeatedScalarFieldContainer[str]
    input: Value
    wait: WaitSpec
    def __init__(self, node_id: _Optional[str] = ..., kind: _Optional[str] = ..., parent_ids: _Optional[_Iterable[str]] = ..., input: _Optional[_Union[Value, _Mapping]] = ..., wait: _Optional[_Union[WaitSpec, _Mapping]] = ...) -> None: ...

class WaitSpec(_message.Message):
    __slots__ = ("key", "deadline_us", "data", "schema", "timer_only")
    KEY_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_US_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TIMER_ONLY_FIELD_NUMBER: _ClassVar[int]
    key: str
    deadline_us: int
    data: Value
    schema: bytes
    timer_only: bool
    def __init__(self, key: _Optional[str] = ..., deadline_us: _Optional[int] = ..., data: _Optional[_Union[Value, _Mapping]] = ..., schema: _Optional[bytes] = ..., timer_only: _Optional[bool] = ...) -> None: ...

class WaitOutcome(_message.Message):
    __slots__ = ("key", "event_id", "timed_out")
    KEY_FIELD_NUMBER: _ClassVar[int]
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    key: str
    event_id: str
    timed_out: bool
    def __init__(self, key: _Optional[str] = ..., event_id: _Optional[str] = ..., timed_out: _Optional[bool] = ...) -> None: ...

class RunStarted(_message.Message):
    __slots__ = ("schema_version", "agent", "input", "config", "limits", "parent_run_id", "parent_node_id", "roots", "forked_from_run_id", "forked_from_seq", "overridden_node_ids", "agent_version")
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    PARENT_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ROOTS_FIELD_NUMBER: _ClassVar[int]
    FORKED_FROM_RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FORKED_FROM_SEQ_FIELD_NUMBER: _ClassVar[int]
    OVERRIDDEN_NODE_IDS_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    schema_version: int
    agent: str
    input: Value
    config: bytes
    limits: BudgetLimits
    parent_run_id: str
    parent_node_id: str
    roots: _containers.RepeatedCompositeFieldContainer[NodeSpec]
    forked_from_run_id: str
    forked_from_seq: int
    overridden_node_ids: _containers.RepeatedScalarFieldContainer[str]
    agent_version: str
    def __init__(self, schema_version: _Optional[int] = ..., agent: _Optional[str] = ..., input: _Optional[_Union[Value, _Mapping]] = ..., config: _Optional[bytes] = ..., limits: _Optional[_Union[BudgetLimits, _Mapping]] = ..., parent_run_id: _Optional[str] = ..., parent_node_id: _Optional[str] = ..., roots: _Optional[_Iterable[_Union[NodeSpec, _Mapping]]] = ..., forked_from_run_id: _Optional[str] = ..., forked_from_seq: _Optional[int] = ..., overridden_node_ids: _Optional[_Iterable[str]] = ..., agent_version: _Optional[str] = ...) -> None: ...

class NodeCompleted(_message.Message):
    __slots__ = ("node_id", "parent_ids", "kind", "output", "spawned", "used", "blobs", "attempt", "started_at_us", "finished_at_us", "is_result", "fallback", "wait", "took_us")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_IDS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    SPAWNED_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    BLOBS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_US_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_US_FIELD_NUMBER: _ClassVar[int]
    IS_RESULT_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    TOOK_US_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    parent_ids: _containers.RepeatedScalarFieldContainer[str]
    kind: str
    output: Value
    spawned: _containers.RepeatedCompositeFieldContainer[NodeSpec]
    used: BudgetUsed
    blobs: _containers.RepeatedCompositeFieldContainer[BlobRef]
    attempt: int
    started_at_us: int
    finished_at_us: int
    is_result: bool
    fallback: bool
    wait: WaitOutcome
    took_us: int
    def __init__(self, node_id: _Optional[str] = ..., parent_ids: _Optional[_Iterable[str]] = ..., kind: _Optional[str] = ..., output: _Optional[_Union[Value, _Mapping]] = ..., spawned: _Optional[_Iterable[_Union[NodeSpec, _Mapping]]] = ..., used: _Optional[_Union[BudgetUsed, _Mapping]] = ..., blobs: _Optional[_Iterable[_Union[BlobRef, _Mapping]]] = ..., attempt: _Optional[int] = ..., started_at_us: _Optional[int] = ..., finished_at_us: _Optional[int] = ..., is_result: _Optional[bool] = ..., fallback: _Optional[bool] = ..., wait: _Optional[_Union[WaitOutcome, _Mapping]] = ..., took_us: _Optional[int] = ...) -> None: ...

class NodeFailed(_message.Message):
    __slots__ = ("node_id", "kind", "error_type", "message", "attempt", "retryable")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ERROR_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    kind: str
    error_type: str
    message: str
    attempt: int
    retryable: bool
    def __init__(self, node_id: _Optional[str] = ..., kind: _Optional[str] = ..., error_type: _Optional[str] = ..., message: _Optional[str] = ..., attempt: _Optional[int] = ..., retryable: _Optional[bool] = ...) -> None: ...

class RunPaused(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class RunWaiting(_message.Message):
    __slots__ = ("keys", "wake_at_us")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    WAKE_AT_US_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    wake_at_us: int
    def __init__(self, keys: _Optional[_Iterable[str]] = ..., wake_at_us: _Optional[int] = ...) -> None: ...

class RunResumed(_message.Message):
    __slots__ = ("limits", "epoch", "owner", "agent_version", "retry")
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    limits: BudgetLimits
    epoch: int
    owner: str
    agent_version: str
    retry: bool
    def __init__(self, limits: _Optional[_Union[BudgetLimits, _Mapping]] = ..., epoch: _Optional[int] = ..., owner: _Optional[str] = ..., agent_version: _Optional[str] = ..., retry: _Optional[bool] = ...) -> None: ...

class RunFinished(_message.Message):
    __slots__ = ("status", "result", "error")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    status: RunStatus
    result: Value
    error: str
    def __init__(self, status: _Optional[_Union[RunStatus, str]] = ..., result: _Optional[_Union[Value, _Mapping]] = ..., error: _Optional[str] = ...) -> None: ...

class StepRecorded(_message.Message):
    __slots__ = ("node_id", "index", "name", "output", "used", "attempt", "started_at_us", "finished_at_us", "took_us")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_US_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_US_FIELD_NUMBER: _ClassVar[int]
    TOOK_US_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    index: int
    name: str
    output: Value
    used: BudgetUsed
    attempt: int
    started_at_us: int
    finished_at_us: int
    took_us: int
    def __init__(self, node_id: _Optional[str] = ..., index: _Optional[int] = ..., name: _Optional[str] = ..., output: _Optional[_Union[Value, _Mapping]] = ..., used: _Optional[_Union[BudgetUsed, _Mapping]] = ..., attempt: _Optional[int] = ..., started_at_us: _Optional[int] = ..., finished_at_us: _Optional[int] = ..., took_us: _Optional[int] = ...) -> None: ...

class Record(_message.Message):
    __slots__ = ("run_started", "node_completed", "node_failed", "run_paused", "run_resumed", "run_finished", "step_recorded", "run_waiting", "at_us")
    RUN_STARTED_FIELD_NUMBER: _ClassVar[int]
    NODE_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    NODE_FAILED_FIELD_NUMBER: _ClassVar[int]
    RUN_PAUSED_FIELD_NUMBER: _ClassVar[int]
    RUN_RESUMED_FIELD_NUMBER: _ClassVar[int]
    RUN_FINISHED_FIELD_NUMBER: _ClassVar[int]
    STEP_RECORDED_FIELD_NUMBER: _ClassVar[int]
    RUN_WAITING_FIELD_NUMBER: _ClassVar[int]
    AT_US_FIELD_NUMBER: _ClassVar[int]
    run_started: RunStarted
    node_completed: NodeCompleted
    node_failed: NodeFailed
    run_paused: RunPaused
    run_resumed: RunResumed
    run_finished: RunFinished
    step_recorded: StepRecorded
    run_waiting: RunWaiting
    at_us: int
    def __init__(self, run_started: _Optional[_Union[RunStarted, _Mapping]] = ..., node_completed: _Optional[_Union[NodeCompleted, _Mapping]] = ..., node_failed: _Optional[_Union[NodeFailed, _Mapping]] = ..., run_paused: _Optional[_Union[RunPaused, _Mapping]] = ..., run_resumed: _Optional[_Union[RunResumed, _Mapping]] = ..., run_finished: _Optional[_Union[RunFinished, _Mapping]] = ..., step_recorded: _Optional[_Union[StepRecorded, _Mapping]] = ..., run_waiting: _Optional[_Union[RunWaiting, _Mapping]] = ..., at_us: _Optional[int] = ...) -> None: ...

class LogChunk(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[Record]
    def __init__(self, records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ...) -> None: ...
