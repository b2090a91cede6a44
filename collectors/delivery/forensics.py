"""Captures on their way up the tree, and the checks every tier applies to them (docs/forensics.md).

Captures ride on the tier's ordinary units (SummaryBatch.captures): they are retained and resent with them,
and the root keeps one per (request, rank), so a resend is harmless. A tier holds at most `max_pending`
captures (the oldest go first, counted) and puts at most `unit_bytes` of them in one unit, so a burst of
captures never makes a unit too large for the parent to accept.
"""

from __future__ import annotations

import collections
import logging
from typing import Generic, TypeVar

from pyroaring import BitMap

from collectors.common.validation import BadInput, check_attempt, check_job, check_world, shown
from telemetry.v1 import forensics_pb2

log = logging.getLogger(__name__)

MAX_TEXT_BYTES = 256 * 1024       # stacks, and flight-recorder JSON, per capture
MAX_PROCESS_BYTES = 64 * 1024     # the agent's /proc facts, JSON
MAX_REQUEST_ID = 64
MAX_RANKS_PER_REQUEST = 64        # ranks one request may name (the root asks for fewer: --forensics-max-ranks)
SOURCES = ("sdk", "py-spy", "proc", "none")
EXIT_CAUSES = ("exception", "fatal_signal", "terminated", "exit_code", "exited", "oom_killed", "killed")
EXIT_TEXT_BYTES = 64 * 1024       # a RankExit's traceback and stacks, each


def _check_names(message: forensics_pb2.Capture | forensics_pb2.CaptureRequest, what: str) -> None:
    """The job, attempt and request id that a capture and the request it answers both carry (BadInput)."""
    check_job(message.job)
    check_attempt(message.attempt, f"{what} attempt")
    if not message.request_id or len(message.request_id) > MAX_REQUEST_ID:
        raise BadInput("INVALID_ARGUMENT", f"capture request_id {shown(message.request_id)} must be 1 to "
                                           f"{MAX_REQUEST_ID} characters")


def check_capture(capture: forensics_pb2.Capture, max_world_size: int) -> None:
    """Refuse (BadInput) a capture no honest agent sends: an unknown source, a field past its bound."""
    _check_names(capture, "capture")
    check_world(capture.rank + 1, max_world_size, f"capture of rank {capture.rank}")
    if capture.source not in SOURCES:
        raise BadInput("INVALID_ARGUMENT", f"capture source {shown(capture.source)} is not one of {SOURCES}")
    for name, limit in (("stacks", MAX_TEXT_BYTES), ("flight_recorder", MAX_TEXT_BYTES),
                        ("process", MAX_PROCESS_BYTES), ("error", 4096), ("reason", 256), ("host", 256)):
        if len(getattr(capture, name)) > limit:
            raise BadInput("INVALID_ARGUMENT", f"capture {name} is longer than {limit} characters")


def request_ranks(request: forensics_pb2.CaptureRequest, max_world_size: int) -> BitMap:
    """The ranks a request names, checked (BadInput when malformed or too many)."""
    _check_names(request, "capture request")
    try:
        ranks = BitMap.deserialize(request.ranks) if request.ranks else BitMap()
    except (ValueError, OverflowError) as exc:
        raise BadInput("INVALID_ARGUMENT", f"capture request {request.request_id}: malformed ranks ({exc})") from None
    if len(ranks) > MAX_RANKS_PER_REQUEST:
        raise BadInput("INVALID_ARGUMENT", f"capture request names {len(ranks)} ranks; at most "
                                           f"{MAX_RANKS_PER_REQUEST}")
    if ranks:
        check_world(ranks.max() + 1, max_world_size, f"rank {ranks.max()} in a capture request")
    return ranks


def with_ranks(request: forensics_pb2.CaptureRequest, ranks: BitMap) -> forensics_pb2.CaptureRequest:
    """A copy of `request` naming only `ranks` (what one child is sent)."""
    copy = forensics_pb2.CaptureRequest()
    copy.CopyFrom(request)
    copy.ranks = ranks.serialize()
    return copy


def check_exit(record: forensics_pb2.RankExit, max_world_size: int) -> None:
    """Refuse (BadInput) a RankExit no honest agent sends: an unknown cause, a field past its bound."""
    check_job(record.job)
    check_world(record.rank + 1, max_world_size, f"exit of rank {record.rank}")
    if record.cause not in EXIT_CAUSES:
        raise BadInput("INVALID_ARGUMENT", f"exit cause {shown(record.cause)} is not one of {EXIT_CAUSES}")
    for name, limit in (("traceback", EXIT_TEXT_BYTES), ("stacks", EXIT_TEXT_BYTES), ("message", 8192),
                        ("why", 4096), ("facts", 32768), ("thread_exception", 1024), ("host", 256),
                        ("exc_type", 256), ("signal", 32), ("died_at_source", 32)):
        if len(getattr(record, name)) > limit:
            raise BadInput("INVALID_ARGUMENT", f"exit {name} is longer than {limit} characters")
    if len(record.fingerprints) > 64:
        raise BadInput("INVALID_ARGUMENT", "an exit carries at most 64 fingerprints")


Message = TypeVar("Message", forensics_pb2.Capture, forensics_pb2.RankExit)


class CaptureQueue(Generic[Message]):
    """Captures (or RankExits) waiting for the next unit to the parent. Not thread-safe: callers hold the node's
    lock."""

    def __init__(self, max_pending: int = 256, unit_bytes: int = 1024 * 1024) -> None:
        self.max_pending = max_pending
        self.unit_bytes = unit_bytes
        self._pending: collections.deque[Message] = collections.deque()
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._pending)

    def put(self, capture: Message) -> None:
        self._pending.append(capture)
        while len(self._pending) > self.max_pending:
            lost = self._pending.popleft()
            self.dropped += 1
            log.warning("forensics queue full: dropped the %s of rank %d of %s", type(lost).__name__, lost.rank,
                        lost.job)

    def take(self) -> list[Message]:
        """The captures for one unit: oldest first, at most unit_bytes (always at least one)."""
        out: list[Message] = []
        size = 0
        while self._pending:
            nxt = self._pending[0].ByteSize()
            if out and size + nxt > self.unit_bytes:
                break
            out.append(self._pending.popleft())
            size += nxt
        return out
