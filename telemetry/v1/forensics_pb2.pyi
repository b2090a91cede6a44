from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CaptureRequest(_message.Message):
    __slots__ = ("request_id", "job", "attempt", "ranks", "reason", "max_bytes")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    job: str
    attempt: int
    ranks: bytes
    reason: str
    max_bytes: int
    def __init__(self, request_id: _Optional[str] = ..., job: _Optional[str] = ..., attempt: _Optional[int] = ..., ranks: _Optional[bytes] = ..., reason: _Optional[str] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class RankCapture(_message.Message):
    __slots__ = ("request_id", "captured_at_ns", "stacks", "flight_recorder")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    CAPTURED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    STACKS_FIELD_NUMBER: _ClassVar[int]
    FLIGHT_RECORDER_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    captured_at_ns: int
    stacks: str
    flight_recorder: str
    def __init__(self, request_id: _Optional[str] = ..., captured_at_ns: _Optional[int] = ..., stacks: _Optional[str] = ..., flight_recorder: _Optional[str] = ...) -> None: ...

class Capture(_message.Message):
    __slots__ = ("request_id", "job", "attempt", "rank", "host", "captured_at_ns", "source", "stacks", "flight_recorder", "process", "error", "reason")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    CAPTURED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    STACKS_FIELD_NUMBER: _ClassVar[int]
    FLIGHT_RECORDER_FIELD_NUMBER: _ClassVar[int]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    job: str
    attempt: int
    rank: int
    host: str
    captured_at_ns: int
    source: str
    stacks: str
    flight_recorder: str
    process: str
    error: str
    reason: str
    def __init__(self, request_id: _Optional[str] = ..., job: _Optional[str] = ..., attempt: _Optional[int] = ..., rank: _Optional[int] = ..., host: _Optional[str] = ..., captured_at_ns: _Optional[int] = ..., source: _Optional[str] = ..., stacks: _Optional[str] = ..., flight_recorder: _Optional[str] = ..., process: _Optional[str] = ..., error: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CollectiveFingerprint(_message.Message):
    __slots__ = ("seq", "hash", "what")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    WHAT_FIELD_NUMBER: _ClassVar[int]
    seq: int
    hash: int
    what: str
    def __init__(self, seq: _Optional[int] = ..., hash: _Optional[int] = ..., what: _Optional[str] = ...) -> None: ...

class MergedFingerprint(_message.Message):
    __slots__ = ("seq", "min_hash", "min_what", "min_ranks", "max_hash", "max_what", "max_ranks")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    MIN_HASH_FIELD_NUMBER: _ClassVar[int]
    MIN_WHAT_FIELD_NUMBER: _ClassVar[int]
    MIN_RANKS_FIELD_NUMBER: _ClassVar[int]
    MAX_HASH_FIELD_NUMBER: _ClassVar[int]
    MAX_WHAT_FIELD_NUMBER: _ClassVar[int]
    MAX_RANKS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    min_hash: int
    min_what: str
    min_ranks: bytes
    max_hash: int
    max_what: str
    max_ranks: bytes
    def __init__(self, seq: _Optional[int] = ..., min_hash: _Optional[int] = ..., min_what: _Optional[str] = ..., min_ranks: _Optional[bytes] = ..., max_hash: _Optional[int] = ..., max_what: _Optional[str] = ..., max_ranks: _Optional[bytes] = ...) -> None: ...

class JobFingerprints(_message.Message):
    __slots__ = ("job", "attempt", "seqs")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    SEQS_FIELD_NUMBER: _ClassVar[int]
    job: str
    attempt: int
    seqs: _containers.RepeatedCompositeFieldContainer[MergedFingerprint]
    def __init__(self, job: _Optional[str] = ..., attempt: _Optional[int] = ..., seqs: _Optional[_Iterable[_Union[MergedFingerprint, _Mapping]]] = ...) -> None: ...

class LastWords(_message.Message):
    __slots__ = ("time_ns", "kind", "exc_type", "message", "traceback", "thread", "exit_code", "exit_code_known", "current_step", "steps_completed", "last_enqueued", "last_completed", "fingerprints", "rank", "pid")
    TIME_NS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    EXC_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    THREAD_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_KNOWN_FIELD_NUMBER: _ClassVar[int]
    CURRENT_STEP_FIELD_NUMBER: _ClassVar[int]
    STEPS_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    LAST_ENQUEUED_FIELD_NUMBER: _ClassVar[int]
    LAST_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINTS_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    time_ns: int
    kind: str
    exc_type: str
    message: str
    traceback: str
    thread: str
    exit_code: int
    exit_code_known: bool
    current_step: int
    steps_completed: int
    last_enqueued: int
    last_completed: int
    fingerprints: _containers.RepeatedCompositeFieldContainer[CollectiveFingerprint]
    rank: int
    pid: int
    def __init__(self, time_ns: _Optional[int] = ..., kind: _Optional[str] = ..., exc_type: _Optional[str] = ..., message: _Optional[str] = ..., traceback: _Optional[str] = ..., thread: _Optional[str] = ..., exit_code: _Optional[int] = ..., exit_code_known: _Optional[bool] = ..., current_step: _Optional[int] = ..., steps_completed: _Optional[int] = ..., last_enqueued: _Optional[int] = ..., last_completed: _Optional[int] = ..., fingerprints: _Optional[_Iterable[_Union[CollectiveFingerprint, _Mapping]]] = ..., rank: _Optional[int] = ..., pid: _Optional[int] = ...) -> None: ...

class RankExit(_message.Message):
    __slots__ = ("job", "attempt", "rank", "host", "cause", "why", "died_at_ns", "died_at_source", "observed_at_ns", "exit_code", "exit_code_known", "signal", "exc_type", "message", "traceback", "stacks", "current_step", "last_enqueued", "last_completed", "fingerprints", "pid", "last_words", "thread_exception", "facts")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    WHY_FIELD_NUMBER: _ClassVar[int]
    DIED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    DIED_AT_SOURCE_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_KNOWN_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    EXC_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    STACKS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_STEP_FIELD_NUMBER: _ClassVar[int]
    LAST_ENQUEUED_FIELD_NUMBER: _ClassVar[int]
    LAST_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    FINGERPRINTS_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    LAST_WORDS_FIELD_NUMBER: _ClassVar[int]
    THREAD_EXCEPTION_FIELD_NUMBER: _ClassVar[int]
    FACTS_FIELD_NUMBER: _ClassVar[int]
    job: str
    attempt: int
    rank: int
    host: str
    cause: str
    why: str
    died_at_ns: int
    died_at_source: str
    observed_at_ns: int
    exit_code: int
    exit_code_known: bool
    signal: str
    exc_type: str
    message: str
    traceback: str
    stacks: str
    current_step: int
    last_enqueued: int
    last_completed: int
    fingerprints: _containers.RepeatedCompositeFieldContainer[CollectiveFingerprint]
    pid: int
    last_words: bool
    thread_exception: str
    facts: str
    def __init__(self, job: _Optional[str] = ..., attempt: _Optional[int] = ..., rank: _Optional[int] = ..., host: _Optional[str] = ..., cause: _Optional[str] = ..., why: _Optional[str] = ..., died_at_ns: _Optional[int] = ..., died_at_source: _Optional[str] = ..., observed_at_ns: _Optional[int] = ..., exit_code: _Optional[int] = ..., exit_code_known: _Optional[bool] = ..., signal: _Optional[str] = ..., exc_type: _Optional[str] = ..., message: _Optional[str] = ..., traceback: _Optional[str] = ..., stacks: _Optional[str] = ..., current_step: _Optional[int] = ..., last_enqueued: _Optional[int] = ..., last_completed: _Optional[int] = ..., fingerprints: _Optional[_Iterable[_Union[CollectiveFingerprint, _Mapping]]] = ..., pid: _Optional[int] = ..., last_words: _Optional[bool] = ..., thread_exception: _Optional[str] = ..., facts: _Optional[str] = ...) -> None: ...
