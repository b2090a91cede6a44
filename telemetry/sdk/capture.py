"""A rank's answer to a capture request (docs/forensics.md): every thread's Python stack, and the flight
recorder's recent entries when torch.distributed is in use.

It runs on one thread of its own, started when the agent first asks (RankAck.CAPTURE), so it answers
while the training thread is blocked in a collective, in I/O or in any C call that released the GIL; a
training thread spinning in pure Python still lets it run (the GIL switches every 5 ms). A rank whose GIL is
held by a C call that never releases it cannot answer: the agent then dumps it from outside (py-spy) or
from /proc alone, and the capture says which source it came from.
"""

from __future__ import annotations

import json
import logging
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from telemetry.names import MAX_CAPTURE_BYTES
from telemetry.v1 import forensics_pb2

log = logging.getLogger("telemetry.sdk")

FR_ENTRIES = 200  # newest flight-recorder entries asked for; fewer are kept if they do not fit max_bytes


TRAINING_MARK = " [this rank's training thread]"


def thread_stacks(max_bytes: int = MAX_CAPTURE_BYTES, skip: int | None = None, training: int | None = None) -> str:
    """Every thread's stack as readable text, most recent call last (traceback's layout); `training` (the thread
    that runs this rank's steps, marked TRAINING_MARK) first, then the main thread; `skip`: a thread id left out
    (the capturing thread itself). A process may run several ranks (the simulator does, one thread each): the
    mark says which stack is the rank's own. Truncated to max_bytes, keeping each thread's innermost frames
    (where it is stuck) when a stack is too long."""
    names = {t.ident: t for t in threading.enumerate()}
    frames = sys._current_frames()
    main = threading.main_thread().ident
    parts = []
    for ident in sorted(frames, key=lambda i: (i != training, i != main, i)):
        if ident == skip:
            continue
        thread = names.get(ident)
        name = thread.name if thread is not None else "?"
        daemon = " daemon" if thread is not None and thread.daemon else ""
        mark = TRAINING_MARK if ident == training else ""
        lines = traceback.format_stack(frames[ident])
        parts.append((f'Thread {ident} "{name}"{daemon}{mark} (most recent call last):\n', lines))
    return _fit(parts, max_bytes)


def _fit(parts: list[tuple[str, list[str]]], max_bytes: int) -> str:
    """Join the threads' stacks; while over max_bytes, cut the outer half of the longest stack (the innermost
    frames, where a thread is stuck, are what a capture is for)."""
    cut = [0] * len(parts)
    sizes = [sum(map(len, lines)) for _, lines in parts]
    while sum(sizes) + sum(len(head) for head, _ in parts) > max_bytes:
        longest = max(range(len(parts)), key=lambda i: sizes[i] if len(parts[i][1]) > 1 else -1, default=None)
        if longest is None or len(parts[longest][1]) <= 1:
            break
        head, lines = parts[longest]
        drop = len(lines) // 2
        parts[longest] = (head, lines[drop:])
        cut[longest] += drop
        sizes[longest] = sum(map(len, parts[longest][1]))
    text = "".join(head + (f"  ... {n} outer frame(s) cut to fit the capture\n" if n else "") + "".join(lines)
                   for (head, lines), n in zip(parts, cut))
    return text[:max_bytes]


def flight_recorder_json(progress: Any, max_bytes: int = MAX_CAPTURE_BYTES) -> str:
    """The default group's recent flight-recorder entries as JSON, newest kept, within max_bytes; "" when
    there is no recorder to read (no torch.distributed, recorder off, no collective yet)."""
    if progress is None:
        return ""
    try:
        from telemetry.torch.flight_recorder import default_group_dump
        dump = default_group_dump(progress, last=FR_ENTRIES)
    except Exception as e:
        log.debug("telemetry: flight recorder not readable for a capture: %s", e)
        return ""
    if not dump:
        return ""
    entries = list(dump.get("entries") or ())
    while True:
        text = json.dumps({**dump, "entries": entries}, default=str, separators=(",", ":"))
        if len(text) <= max_bytes or not entries:
            return text if len(text) <= max_bytes else ""
        entries = entries[len(entries) // 2:] if len(entries) > 1 else []


def take(request: forensics_pb2.CaptureRequest, progress: Any,
         training: int | None = None) -> forensics_pb2.RankCapture:
    """The capture for `request`, taken now on the calling thread; `training`: the rank's training thread."""
    max_bytes = request.max_bytes or MAX_CAPTURE_BYTES
    stacks = thread_stacks(max_bytes, skip=threading.get_ident(), training=training)
    return forensics_pb2.RankCapture(request_id=request.request_id, captured_at_ns=time.time_ns(), stacks=stacks,
                                     flight_recorder=flight_recorder_json(progress, max_bytes))


class Responder:
    """Answers capture requests, each once, one at a time on one thread of its own (a slow recorder dump never
    delays the acks the sender reads); `progress` gives the flight recorder once torch.distributed is up.

    The work is bounded whatever the tree asks: at most `MAX_QUEUED` requests wait (more are dropped and
    counted in `dropped`: the agent then looks from outside), and captures are taken one after the other.
    Before, every request started a thread of its own: 1,500 requests in 5 s started 1,500 threads walking
    every frame of the training process at once (issue 26: one flood ended in a segfault in libpython). The
    thread starts with the first request and ends after `IDLE_S` without one."""

    MAX_REMEMBERED = 256
    MAX_QUEUED = 4
    IDLE_S = 30.0

    def __init__(self, progress: Callable[[], Any], send: Callable[[forensics_pb2.RankCapture], object],
                 training: Callable[[], int | None] = lambda: None) -> None:
        self._progress = progress
        self._send = send
        self._training = training  # the id of the thread that runs the rank's steps, shown first and marked
        self._seen: dict[str, None] = {}
        self._queue: queue.Queue[forensics_pb2.CaptureRequest] = queue.Queue(maxsize=self.MAX_QUEUED)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.answered = 0
        self.dropped = 0

    def request(self, request: forensics_pb2.CaptureRequest) -> None:
        """Queue a request (never blocks: called on the sender's ack-reading thread)."""
        with self._lock:
            if request.request_id in self._seen:
                return
            self._seen[request.request_id] = None
            while len(self._seen) > self.MAX_REMEMBERED:
                del self._seen[next(iter(self._seen))]
            try:
                self._queue.put_nowait(request)
            except queue.Full:
                self.dropped += 1
                log.debug("telemetry: capture %s dropped: %d already waiting", request.request_id, self.MAX_QUEUED)
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="telemetry-capture", daemon=True)
                self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                request = self._queue.get(timeout=self.IDLE_S)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():  # a request queued meanwhile finds this thread still running
                        self._thread = None
                        return
                continue
            self._answer(request)

    def _answer(self, request: forensics_pb2.CaptureRequest) -> None:
        try:
            capture = take(request, self._progress(), self._training())
        except Exception as e:  # never let a capture take the rank down
            log.debug("telemetry: capture %s failed: %s", request.request_id, e)
            capture = forensics_pb2.RankCapture(request_id=request.request_id, captured_at_ns=time.time_ns(),
                                                stacks=f"capture failed: {type(e).__name__}: {e}")
        self._send(capture)
        self.answered += 1
