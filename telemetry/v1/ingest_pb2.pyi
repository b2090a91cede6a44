from telemetry.v1 import forensics_pb2 as _forensics_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MetricValues(_message.Message):
    __slots__ = ("metric", "values")
    METRIC_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    metric: str
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, metric: _Optional[str] = ..., values: _Optional[_Iterable[float]] = ...) -> None: ...

class RankStepBatch(_message.Message):
    __slots__ = ("step", "metrics", "closed", "end_time_ns")
    STEP_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    END_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    step: int
    metrics: _containers.RepeatedCompositeFieldContainer[MetricValues]
    closed: bool
    end_time_ns: int
    def __init__(self, step: _Optional[int] = ..., metrics: _Optional[_Iterable[_Union[MetricValues, _Mapping]]] = ..., closed: _Optional[bool] = ..., end_time_ns: _Optional[int] = ...) -> None: ...

class RankBatch(_message.Message):
    __slots__ = ("job", "rank", "seq", "steps")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    job: str
    rank: int
    seq: int
    steps: _containers.RepeatedCompositeFieldContainer[RankStepBatch]
    def __init__(self, job: _Optional[str] = ..., rank: _Optional[int] = ..., seq: _Optional[int] = ..., steps: _Optional[_Iterable[_Union[RankStepBatch, _Mapping]]] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("time_ns", "current_step", "steps_completed", "extra", "fingerprints", "dropped")
    class ExtraEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    TIME_NS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_STEP_FIELD_NUMBER: _ClassVar[int]
    STEPS_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINTS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    time_ns: int
    current_step: int
    steps_completed: int
    extra: _containers.ScalarMap[str, float]
    fingerprints: _containers.RepeatedCompositeFieldContainer[_forensics_pb2.CollectiveFingerprint]
    dropped: int
    def __init__(self, time_ns: _Optional[int] = ..., current_step: _Optional[int] = ..., steps_completed: _Optional[int] = ..., extra: _Optional[_Mapping[str, float]] = ..., fingerprints: _Optional[_Iterable[_Union[_forensics_pb2.CollectiveFingerprint, _Mapping]]] = ..., dropped: _Optional[int] = ...) -> None: ...

class RankHello(_message.Message):
    __slots__ = ("job", "rank", "world_size", "local_rank", "host", "pid", "device", "dropped", "incarnation", "attempt")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    job: str
    rank: int
    world_size: int
    local_rank: int
    host: str
    pid: int
    device: str
    dropped: int
    incarnation: int
    attempt: int
    def __init__(self, job: _Optional[str] = ..., rank: _Optional[int] = ..., world_size: _Optional[int] = ..., local_rank: _Optional[int] = ..., host: _Optional[str] = ..., pid: _Optional[int] = ..., device: _Optional[str] = ..., dropped: _Optional[int] = ..., incarnation: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class RankBye(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RankMessage(_message.Message):
    __slots__ = ("hello", "batch", "heartbeat", "bye", "capture", "last_words")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    BYE_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_FIELD_NUMBER: _ClassVar[int]
    LAST_WORDS_FIELD_NUMBER: _ClassVar[int]
    hello: RankHello
    batch: RankBatch
    heartbeat: Heartbeat
    bye: RankBye
    capture: _forensics_pb2.RankCapture
    last_words: _forensics_pb2.LastWords
    def __init__(self, hello: _Optional[_Union[RankHello, _Mapping]] = ..., batch: _Optional[_Union[RankBatch, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., bye: _Optional[_Union[RankBye, _Mapping]] = ..., capture: _Optional[_Union[_forensics_pb2.RankCapture, _Mapping]] = ..., last_words: _Optional[_Union[_forensics_pb2.LastWords, _Mapping]] = ...) -> None: ...

class RankAck(_message.Message):
    __slots__ = ("status", "seq", "reason", "dropped_values", "capture", "fault_file")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATUS_UNSPECIFIED: _ClassVar[RankAck.Status]
        REGISTERED: _ClassVar[RankAck.Status]
        RECEIVED: _ClassVar[RankAck.Status]
        DURABLE: _ClassVar[RankAck.Status]
        REFUSED: _ClassVar[RankAck.Status]
        DROPPED_LATE: _ClassVar[RankAck.Status]
        CAPTURE: _ClassVar[RankAck.Status]
        NOTED: _ClassVar[RankAck.Status]
    STATUS_UNSPECIFIED: RankAck.Status
    REGISTERED: RankAck.Status
    RECEIVED: RankAck.Status
    DURABLE: RankAck.Status
    REFUSED: RankAck.Status
    DROPPED_LATE: RankAck.Status
    CAPTURE: RankAck.Status
    NOTED: RankAck.Status
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DROPPED_VALUES_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_FIELD_NUMBER: _ClassVar[int]
    FAULT_FILE_FIELD_NUMBER: _ClassVar[int]
    status: RankAck.Status
    seq: int
    reason: str
    dropped_values: int
    capture: _forensics_pb2.CaptureRequest
    fault_file: str
    def __init__(self, status: _Optional[_Union[RankAck.Status, str]] = ..., seq: _Optional[int] = ..., reason: _Optional[str] = ..., dropped_values: _Optional[int] = ..., capture: _Optional[_Union[_forensics_pb2.CaptureRequest, _Mapping]] = ..., fault_file: _Optional[str] = ...) -> None: ...
