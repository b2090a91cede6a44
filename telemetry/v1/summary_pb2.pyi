from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Sketch(_message.Message):
    __slots__ = ("max_centroids", "means", "weights")
    MAX_CENTROIDS_FIELD_NUMBER: _ClassVar[int]
    MEANS_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    max_centroids: int
    means: bytes
    weights: bytes
    def __init__(self, max_centroids: _Optional[int] = ..., means: _Optional[bytes] = ..., weights: _Optional[bytes] = ...) -> None: ...

class Summary(_message.Message):
    __slots__ = ("count", "sum", "mean", "m2", "min", "argmin", "max", "argmax", "k", "top_values", "top_sources", "bottom_values", "bottom_sources", "sketch", "sources", "nonfinite_count", "nonfinite_sources", "first_time_ns", "last_time_ns")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    SUM_FIELD_NUMBER: _ClassVar[int]
    MEAN_FIELD_NUMBER: _ClassVar[int]
    M2_FIELD_NUMBER: _ClassVar[int]
    MIN_FIELD_NUMBER: _ClassVar[int]
    ARGMIN_FIELD_NUMBER: _ClassVar[int]
    MAX_FIELD_NUMBER: _ClassVar[int]
    ARGMAX_FIELD_NUMBER: _ClassVar[int]
    K_FIELD_NUMBER: _ClassVar[int]
    TOP_VALUES_FIELD_NUMBER: _ClassVar[int]
    TOP_SOURCES_FIELD_NUMBER: _ClassVar[int]
    BOTTOM_VALUES_FIELD_NUMBER: _ClassVar[int]
    BOTTOM_SOURCES_FIELD_NUMBER: _ClassVar[int]
    SKETCH_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    NONFINITE_COUNT_FIELD_NUMBER: _ClassVar[int]
    NONFINITE_SOURCES_FIELD_NUMBER: _ClassVar[int]
    FIRST_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    LAST_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    count: int
    sum: float
    mean: float
    m2: float
    min: float
    argmin: int
    max: float
    argmax: int
    k: int
    top_values: _containers.RepeatedScalarFieldContainer[float]
    top_sources: _containers.RepeatedScalarFieldContainer[int]
    bottom_values: _containers.RepeatedScalarFieldContainer[float]
    bottom_sources: _containers.RepeatedScalarFieldContainer[int]
    sketch: Sketch
    sources: bytes
    nonfinite_count: int
    nonfinite_sources: bytes
    first_time_ns: int
    last_time_ns: int
    def __init__(self, count: _Optional[int] = ..., sum: _Optional[float] = ..., mean: _Optional[float] = ..., m2: _Optional[float] = ..., min: _Optional[float] = ..., argmin: _Optional[int] = ..., max: _Optional[float] = ..., argmax: _Optional[int] = ..., k: _Optional[int] = ..., top_values: _Optional[_Iterable[float]] = ..., top_sources: _Optional[_Iterable[int]] = ..., bottom_values: _Optional[_Iterable[float]] = ..., bottom_sources: _Optional[_Iterable[int]] = ..., sketch: _Optional[_Union[Sketch, _Mapping]] = ..., sources: _Optional[bytes] = ..., nonfinite_count: _Optional[int] = ..., nonfinite_sources: _Optional[bytes] = ..., first_time_ns: _Optional[int] = ..., last_time_ns: _Optional[int] = ...) -> None: ...

class TimeBucket(_message.Message):
    __slots__ = ("start_ms", "width_ms")
    START_MS_FIELD_NUMBER: _ClassVar[int]
    WIDTH_MS_FIELD_NUMBER: _ClassVar[int]
    start_ms: int
    width_ms: int
    def __init__(self, start_ms: _Optional[int] = ..., width_ms: _Optional[int] = ...) -> None: ...

class WindowKey(_message.Message):
    __slots__ = ("job", "metric", "step", "bucket", "attempt")
    JOB_FIELD_NUMBER: _ClassVar[int]
    METRIC_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    BUCKET_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    job: str
    metric: str
    step: int
    bucket: TimeBucket
    attempt: int
    def __init__(self, job: _Optional[str] = ..., metric: _Optional[str] = ..., step: _Optional[int] = ..., bucket: _Optional[_Union[TimeBucket, _Mapping]] = ..., attempt: _Optional[int] = ...) -> None: ...
