from tether.v1 import records_pb2 as _records_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LogColumns(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: RecordColumns
    def __init__(self, records: _Optional[_Union[RecordColumns, _Mapping]] = ...) -> None: ...

class RecordColumns(_message.Message):
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
    run_started: _containers.RepeatedCompositeFieldContainer[_records_pb2.RunStarted]
    node_completed: NodeColumns
    node_failed: _containers.RepeatedCompositeFieldContainer[_records_pb2.NodeFailed]
    run_paused: _containers.RepeatedCompositeFieldContainer[_records_pb2.RunPaused]
    run_resumed: _containers.RepeatedCompositeFieldContainer[_records_pb2.RunResumed]
    run_finished: _containers.RepeatedCompositeFieldContainer[_records_pb2.RunFinished]
    step_recorded: _containers.RepeatedCompositeFieldContainer[_records_pb2.StepRecorded]
    run_waiting: _containers.RepeatedCompositeFieldContainer[_records_pb2.RunWaiting]
    at_us: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, run_started: _Optional[_Iterable[_Union[_records_pb2.RunStarted, _Mapping]]] = ..., node_completed: _Optional[_Union[NodeColumns, _Mapping]] = ..., node_failed: _Optional[_Iterable[_Union[_records_pb2.NodeFailed, _Mapping]]] = ..., run_paused: _Optional[_Iterable[_Union[_records_pb2.RunPaused, _Mapping]]] = ..., run_resumed: _Optional[_Iterable[_Union[_records_pb2.RunResumed, _Mapping]]] = ..., run_finished: _Optional[_Iterable[_Union[_records_pb2.RunFinished, _Mapping]]] = ..., step_recorded: _Optional[_Iterable[_Union[_records_pb2.StepRecorded, _Mapping]]] = ..., run_waiting: _Optional[_Iterable[_Union[_records_pb2.RunWaiting, _Mapping]]] = ..., at_us: _Optional[_Iterable[int]] = ...) -> None: ...

class NodeColumns(_message.Message):
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
    node_id: _containers.RepeatedScalarFieldContainer[str]
    parent_ids: _containers.RepeatedScalarFieldContainer[str]
    kind: str
    output: _records_pb2.Value
    spawned: SpecColumns
    used: UsedColumns
    blobs: _containers.RepeatedCompositeFieldContainer[_records_pb2.BlobRef]
    attempt: int
    started_at_us: int
    finished_at_us: _containers.RepeatedScalarFieldContainer[int]
    is_result: _containers.RepeatedScalarFieldContainer[bool]
    fallback: bool
    wait: _containers.RepeatedCompositeFieldContainer[_records_pb2.WaitOutcome]
    took_us: int
    def __init__(self, node_id: _Optional[_Iterable[str]] = ..., parent_ids: _Optional[_Iterable[str]] = ..., kind: _Optional[str] = ..., output: _Optional[_Union[_records_pb2.Value, _Mapping]] = ..., spawned: _Optional[_Union[SpecColumns, _Mapping]] = ..., used: _Optional[_Union[UsedColumns, _Mapping]] = ..., blobs: _Optional[_Iterable[_Union[_records_pb2.BlobRef, _Mapping]]] = ..., attempt: _Optional[int] = ..., started_at_us: _Optional[int] = ..., finished_at_us: _Optional[_Iterable[int]] = ..., is_result: _Optional[_Iterable[bool]] = ..., fallback: _Optional[bool] = ..., wait: _Optional[_Iterable[_Union[_records_pb2.WaitOutcome, _Mapping]]] = ..., took_us: _Optional[int] = ...) -> None: ...

class SpecColumns(_message.Message):
    __slots__ = ("node_id", "kind", "parent_ids", "input", "wait")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PARENT_IDS_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    node_id: _containers.RepeatedScalarFieldContainer[str]
    kind: str
    parent_ids: _containers.RepeatedScalarFieldContainer[str]
    input: _records_pb2.Value
    wait: _containers.RepeatedCompositeFieldContainer[_records_pb2.WaitSpec]
    def __init__(self, node_id: _Optional[_Iterable[str]] = ..., kind: _Optional[str] = ..., parent_ids: _Optional[_Iterable[str]] = ..., input: _Optional[_Union[_records_pb2.Value, _Mapping]] = ..., wait: _Optional[_Iterable[_Union[_records_pb2.WaitSpec, _Mapping]]] = ...) -> None: ...

class UsedColumns(_message.Message):
    __slots__ = ("tokens_in", "tokens_out", "wall_ms", "cost", "model_calls", "rate_wait_ms")
    TOKENS_IN_FIELD_NUMBER: _ClassVar[int]
    TOKENS_OUT_FIELD_NUMBER: _ClassVar[int]
    WALL_MS_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    MODEL_CALLS_FIELD_NUMBER: _ClassVar[int]
    RATE_WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    tokens_in: _containers.RepeatedScalarFieldContainer[int]
    tokens_out: _containers.RepeatedScalarFieldContainer[int]
    wall_ms: int
    cost: _containers.RepeatedScalarFieldContainer[float]
    model_calls: _containers.RepeatedScalarFieldContainer[int]
    rate_wait_ms: int
    def __init__(self, tokens_in: _Optional[_Iterable[int]] = ..., tokens_out: _Optional[_Iterable[int]] = ..., wall_ms: _Optional[int] = ..., cost: _Optional[_Iterable[float]] = ..., model_calls: _Optional[_Iterable[int]] = ..., rate_wait_ms: _Optional[int] = ...) -> None: ...
