from google.protobuf.internal import containers as _containers
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
