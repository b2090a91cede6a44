"""The agent's part of a capture (docs/forensics.md): ask the rank, wait a little, else look from outside.

A request from the root names ranks; for each one this agent hosts, the rank is asked over its own stream
(RankAck.CAPTURE) and given `answer_timeout_s` to answer with its stacks and flight recorder. A rank that
does not answer in time (its GIL held by a C call, SIGSTOPped, its stream gone) is dumped by py-spy from
outside, or described from /proc alone when py-spy cannot; a rank this agent does not host gets a capture
of source "none" saying so, so the root never waits for it. Every capture carries the agent's /proc facts.
One capture per (request, rank): a repeated request, or an answer after the fallback began, is ignored.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pyroaring import BitMap

from collectors.agent.ranks import RankInfo, RankRegistry
from collectors.common.attempts import scoped
from collectors.common.validation import BadInput
from collectors.delivery.forensics import MAX_PROCESS_BYTES, MAX_TEXT_BYTES, request_ranks, with_ranks
from collectors.probes.snapshot import process_facts, pyspy_dump
from telemetry.v1 import forensics_pb2, ingest_pb2

log = logging.getLogger(__name__)

DEFAULT_ANSWER_TIMEOUT_S = 3.0
MAX_IN_FLIGHT = 1024  # (request, rank) pairs awaiting an answer; more are refused as bad input


@dataclass
class _Asked:
    request: forensics_pb2.CaptureRequest
    info: RankInfo
    deadline: float


class Captures:
    """Not thread-safe except `answered_facts`: callers hold the node's lock; `emit` queues a finished
    capture for the parent (called under the node's lock, from the fallback pool too)."""

    def __init__(self, registry: RankRegistry, emit: Callable[[forensics_pb2.Capture], None],
                 lock: Any, answer_timeout_s: float = DEFAULT_ANSWER_TIMEOUT_S,
                 pyspy_timeout_s: float = 10.0) -> None:
        self.registry = registry
        self.emit = emit
        self.lock = lock
        self.answer_timeout_s = answer_timeout_s
        self.pyspy_timeout_s = pyspy_timeout_s
        self._asked: dict[tuple[str, str, int], _Asked] = {}
        self._done: dict[tuple[str, str, int], None] = {}  # recently finished (a repeat is ignored)
        self._pool: ThreadPoolExecutor | None = None
        self.counts = {"asked": 0, "answered": 0, "fallbacks": 0}

    def request(self, request: forensics_pb2.CaptureRequest, now: float) -> None:
        """A request from the parent. Raises BadInput when it is malformed."""
        ranks = request_ranks(request, self.registry.max_world_size)
        job = scoped(request.job, request.attempt)
        for rank in ranks:
            key = (request.request_id, job, rank)
            if key in self._asked or key in self._done:
                continue
            info = self.registry.ranks.get((job, rank))
            if info is None:
                self._finish(key, request, None, "none", error="this agent does not host the rank (any more)")
                continue
            if len(self._asked) >= MAX_IN_FLIGHT:
                raise BadInput("RESOURCE_EXHAUSTED", f"{MAX_IN_FLIGHT} captures already awaiting an answer")
            self.counts["asked"] += 1
            asked = self._asked[key] = _Asked(request, info, now + self.answer_timeout_s)
            if info.link is not None and not info.closed and info.verdict != "dead":
                info.link.put(ingest_pb2.RankAck(status=ingest_pb2.RankAck.CAPTURE,
                                                 capture=with_ranks(request, BitMap([rank]))))
            else:
                asked.deadline = now  # nobody to ask: look from outside at the next tick

    def answered(self, info: RankInfo, capture: forensics_pb2.RankCapture, facts: dict) -> None:
        """The rank's own answer (facts: its /proc view, read by the caller before taking the lock)."""
        key = (capture.request_id, info.job, info.rank)
        asked = self._asked.pop(key, None)
        if asked is None:
            return  # not asked, asked already answered, or the fallback took over
        self.counts["answered"] += 1
        self._finish(key, asked.request, info, "sdk", stacks=capture.stacks,
                     flight_recorder=capture.flight_recorder, facts=facts,
                     captured_at_ns=capture.captured_at_ns or time.time_ns())

    def tick(self, now: float) -> None:
        """Ranks that did not answer in time: dumped from outside, on a small pool (py-spy takes ~0.1-1 s)."""
        late = [key for key, asked in self._asked.items() if now >= asked.deadline]
        for key in late:
            asked = self._asked.pop(key)
            self.counts["fallbacks"] += 1
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="agent-capture")
            self._pool.submit(self._from_outside, key, asked)

    def next_deadline(self) -> float | None:
        """The earliest answer deadline of the ranks asked (when `tick` has work), or None."""
        return min((asked.deadline for asked in self._asked.values()), default=None)

    def forget_job(self, job: str) -> None:
        for key in [k for k in self._asked if k[1] == job]:
            del self._asked[key]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    # ---------------------------------------------------------------- internals
    def _from_outside(self, key: tuple[str, str, int], asked: _Asked) -> None:
        info = asked.info
        facts = process_facts(info.pid)
        error = f"the rank did not answer within {self.answer_timeout_s:g} s"
        if info.closed:
            error = "the rank had closed its run"
        elif info.link is None:
            error = "the rank's stream to this agent is gone"
        stacks, source = "", "proc"
        if facts.get("alive"):
            stacks, why = pyspy_dump(info.pid, self.pyspy_timeout_s, MAX_TEXT_BYTES)
            if stacks:
                source = "py-spy"
            else:
                error += f"; {why}"
        else:
            error += "; its process has exited"
        with self.lock:
            self._finish(key, asked.request, info, source, stacks=stacks, facts=facts, error=error)

    def _finish(self, key: tuple[str, str, int], request: forensics_pb2.CaptureRequest, info: RankInfo | None,
                source: str, *, stacks: str = "", flight_recorder: str = "", facts: dict | None = None,
                error: str = "", captured_at_ns: int = 0) -> None:
        self._done[key] = None
        while len(self._done) > 4 * MAX_IN_FLIGHT:
            del self._done[next(iter(self._done))]
        process = json.dumps(facts or {}, separators=(",", ":"))[:MAX_PROCESS_BYTES]
        self.emit(forensics_pb2.Capture(
            request_id=request.request_id, job=request.job, attempt=request.attempt, rank=key[2],
            host=info.host if info is not None else "", captured_at_ns=captured_at_ns or time.time_ns(),
            source=source, stacks=stacks[:MAX_TEXT_BYTES], flight_recorder=flight_recorder[:MAX_TEXT_BYTES],
            process=process, error=error[:4096], reason=request.reason[:256]))
