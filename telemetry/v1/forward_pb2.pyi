from telemetry.v1 import forensics_pb2 as _forensics_pb2
from telemetry.v1 import summary_pb2 as _summary_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WindowSummary(_message.Message):
    __slots__ = ("key", "summary", "expected", "late")
    KEY_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FIELD_NUMBER: _ClassVar[int]
    LATE_FIELD_NUMBER: _ClassVar[int]
    key: _summary_pb2.WindowKey
    summary: _summary_pb2.Summary
    expected: int
    late: bool
    def __init__(self, key: _Optional[_Union[_summary_pb2.WindowKey, _Mapping]] = ..., summary: _Optional[_Union[_summary_pb2.Summary, _Mapping]] = ..., expected: _Optional[int] = ..., late: _Optional[bool] = ...) -> None: ...

class SummaryBatch(_message.Message):
    __slots__ = ("sender_id", "seq", "windows", "ranks", "counters", "captures", "fingerprints", "exits", "skip_received")
    SENDER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    COUNTERS_FIELD_NUMBER: _ClassVar[int]
    CAPTURES_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINTS_FIELD_NUMBER: _ClassVar[int]
    EXITS_FIELD_NUMBER: _ClassVar[int]
    SKIP_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    sender_id: str
    seq: int
    windows: _containers.RepeatedCompositeFieldContainer[WindowSummary]
    ranks: _containers.RepeatedCompositeFieldContainer[RankStates]
    counters: Counters
    captures: _containers.RepeatedCompositeFieldContainer[_forensics_pb2.Capture]
    fingerprints: _containers.RepeatedCompositeFieldContainer[_forensics_pb2.JobFingerprints]
    exits: _containers.RepeatedCompositeFieldContainer[_forensics_pb2.RankExit]
    skip_received: bool
    def __init__(self, sender_id: _Optional[str] = ..., seq: _Optional[int] = ..., windows: _Optional[_Iterable[_Union[WindowSummary, _Mapping]]] = ..., ranks: _Optional[_Iterable[_Union[RankStates, _Mapping]]] = ..., counters: _Optional[_Union[Counters, _Mapping]] = ..., captures: _Optional[_Iterable[_Union[_forensics_pb2.Capture, _Mapping]]] = ..., fingerprints: _Optional[_Iterable[_Union[_forensics_pb2.JobFingerprints, _Mapping]]] = ..., exits: _Optional[_Iterable[_Union[_forensics_pb2.RankExit, _Mapping]]] = ..., skip_received: _Optional[bool] = ...) -> None: ...

class RankStates(_message.Message):
    __slots__ = ("job", "alive", "stuck", "dead", "world_size", "host_ranks", "hosts", "closed", "attempt", "processes")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    STUCK_FIELD_NUMBER: _ClassVar[int]
    DEAD_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    HOST_RANKS_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    job: str
    alive: bytes
    stuck: bytes
    dead: bytes
    world_size: int
    host_ranks: _containers.RepeatedScalarFieldContainer[int]
    hosts: _containers.RepeatedScalarFieldContainer[str]
    closed: bytes
    attempt: int
    processes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, job: _Optional[str] = ..., alive: _Optional[bytes] = ..., stuck: _Optional[bytes] = ..., dead: _Optional[bytes] = ..., world_size: _Optional[int] = ..., host_ranks: _Optional[_Iterable[int]] = ..., hosts: _Optional[_Iterable[str]] = ..., closed: _Optional[bytes] = ..., attempt: _Optional[int] = ..., processes: _Optional[_Iterable[int]] = ...) -> None: ...

class Counters(_message.Message):
    __slots__ = ("sdk_dropped", "dropped_windows", "rejected_overlaps", "duplicates", "resent", "late", "bad_inputs", "refused_streams", "late_dropped", "probe_skipped", "forensics_dropped", "hardware_events_dropped", "reply_streams_cut", "unheld_releases")
    SDK_DROPPED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_WINDOWS_FIELD_NUMBER: _ClassVar[int]
    REJECTED_OVERLAPS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    RESENT_FIELD_NUMBER: _ClassVar[int]
    LATE_FIELD_NUMBER: _ClassVar[int]
    BAD_INPUTS_FIELD_NUMBER: _ClassVar[int]
    REFUSED_STREAMS_FIELD_NUMBER: _ClassVar[int]
    LATE_DROPPED_FIELD_NUMBER: _ClassVar[int]
    PROBE_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    FORENSICS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    HARDWARE_EVENTS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    REPLY_STREAMS_CUT_FIELD_NUMBER: _ClassVar[int]
    UNHELD_RELEASES_FIELD_NUMBER: _ClassVar[int]
    sdk_dropped: int
    dropped_windows: int
    rejected_overlaps: int
    duplicates: int
    resent: int
    late: int
    bad_inputs: int
    refused_streams: int
    late_dropped: int
    probe_skipped: int
    forensics_dropped: int
    hardware_events_dropped: int
    reply_streams_cut: int
    unheld_releases: int
    def __init__(self, sdk_dropped: _Optional[int] = ..., dropped_windows: _Optional[int] = ..., rejected_overlaps: _Optional[int] = ..., duplicates: _Optional[int] = ..., resent: _Optional[int] = ..., late: _Optional[int] = ..., bad_inputs: _Optional[int] = ..., refused_streams: _Optional[int] = ..., late_dropped: _Optional[int] = ..., probe_skipped: _Optional[int] = ..., forensics_dropped: _Optional[int] = ..., hardware_events_dropped: _Optional[int] = ..., reply_streams_cut: _Optional[int] = ..., unheld_releases: _Optional[int] = ...) -> None: ...

class Rejection(_message.Message):
    __slots__ = ("index", "key", "overlapping_sources", "reason", "refused_sources")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    OVERLAPPING_SOURCES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REFUSED_SOURCES_FIELD_NUMBER: _ClassVar[int]
    index: int
    key: _summary_pb2.WindowKey
    overlapping_sources: _containers.RepeatedScalarFieldContainer[int]
    reason: str
    refused_sources: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, index: _Optional[int] = ..., key: _Optional[_Union[_summary_pb2.WindowKey, _Mapping]] = ..., overlapping_sources: _Optional[_Iterable[int]] = ..., reason: _Optional[str] = ..., refused_sources: _Optional[_Iterable[int]] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("seq", "status", "rejections", "capture_requests")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        STATUS_UNSPECIFIED: _ClassVar[Ack.Status]
        RECEIVED: _ClassVar[Ack.Status]
        DURABLE: _ClassVar[Ack.Status]
        REJECTED_OVERLAP: _ClassVar[Ack.Status]
    STATUS_UNSPECIFIED: Ack.Status
    RECEIVED: Ack.Status
    DURABLE: Ack.Status
    REJECTED_OVERLAP: Ack.Status
    SEQ_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REJECTIONS_FIELD_NUMBER: _ClassVar[int]
    CAPTURE_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    status: Ack.Status
    rejections: _containers.RepeatedCompositeFieldContainer[Rejection]
    capture_requests: _containers.RepeatedCompositeFieldContainer[_forensics_pb2.CaptureRequest]
    def __init__(self, seq: _Optional[int] = ..., status: _Optional[_Union[Ack.Status, str]] = ..., rejections: _Optional[_Iterable[_Union[Rejection, _Mapping]]] = ..., capture_requests: _Optional[_Iterable[_Union[_forensics_pb2.CaptureRequest, _Mapping]]] = ...) -> None: ...

class HostRegistration(_message.Message):
    __slots__ = ("host", "machine_id", "explicit_index", "instance")
    HOST_FIELD_NUMBER: _ClassVar[int]
    MACHINE_ID_FIELD_NUMBER: _ClassVar[int]
    EXPLICIT_INDEX_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    host: str
    machine_id: str
    explicit_index: int
    instance: str
    def __init__(self, host: _Optional[str] = ..., machine_id: _Optional[str] = ..., explicit_index: _Optional[int] = ..., instance: _Optional[str] = ...) -> None: ...

class HostAssignment(_message.Message):
    __slots__ = ("index", "refused", "known")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    index: int
    refused: str
    known: bool
    def __init__(self, index: _Optional[int] = ..., refused: _Optional[str] = ..., known: _Optional[bool] = ...) -> None: ...
