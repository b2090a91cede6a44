"""The sending side of a tier: numbered units kept until the parent says they are durable (DESIGN §5).

One thread owns the Forward stream to the parent. After any break it
reconnects with jittered backoff (to the fallback parent when the primary
does not answer) and resends every unit not yet acknowledged DURABLE; the
parent's overlap rules make that resend safe.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from collectors.common.transport import Security, call_metadata, make_channel
from telemetry.backoff import Backoff
from telemetry.streams import END, until_end
from telemetry.v1 import forensics_pb2, forward_pb2, forward_pb2_grpc

log = logging.getLogger(__name__)

POLLER_SLICE_S = 0.25  # a little more than the 0.2 s grpc's connectivity poller waits per watch

@dataclass
class Unit:
    seq: int
    message: forward_pb2.SummaryBatch
    payload: object  # the node's own record of what the unit holds (its OutParts)


class Outbox:
    """Numbered, retained, resent units to a parent; callbacks run on the outbox thread."""

    def __init__(self, sender_id: str, parents: list[str], security: Security | None,
                 on_ack: Callable[[Unit, forward_pb2.Ack], None],
                 max_units: int = 100_000, on_drop: Callable[[Unit], None] | None = None,
                 connect_timeout_s: float = 2.0) -> None:
        if not parents:
            raise ValueError("an outbox needs at least one parent address")
        self.sender_id = sender_id
        self.parents = parents
        self.security = security
        self._on_ack = on_ack
        self.on_drop = on_drop
        # Capture requests the parent sends down (on Acks with seq 0); called on the outbox thread.
        self.on_requests: Callable[[list[forensics_pb2.CaptureRequest]], None] | None = None
        self.max_units = max_units
        self.connect_timeout_s = connect_timeout_s
        self._lock = threading.Lock()
        self._unacked: dict[int, Unit] = {}
        self._next_seq = 1
        self._queue: queue.SimpleQueue[Any] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"outbox-{sender_id}", daemon=True)
        self._call: grpc.Future[Any] | None = None
        self.connected_to: str | None = None
        self.resent = 0
        self.dropped_units = 0
        self.connections = 0

    def start(self) -> None:
        self._thread.start()

    def submit(self, message: forward_pb2.SummaryBatch, payload: object) -> Unit:
        """Number, retain and send a unit (sent on the current stream, or on the next one)."""
        with self._lock:
            seq = self._next_seq
            self._next_seq += 1
            message.sender_id = self.sender_id
            message.seq = seq
            unit = Unit(seq, message, payload)
            self._unacked[seq] = unit
            dropped = []
            while len(self._unacked) > self.max_units:
                oldest = min(self._unacked)
                dropped.append(self._unacked.pop(oldest))
            if self._queue is not None:
                self._queue.put(message)
        for lost in dropped:
            self.dropped_units += 1
            log.warning("outbox full: dropped unit %d (%d windows)", lost.seq, len(lost.message.windows))
            if self.on_drop:
                self.on_drop(lost)
        return unit

    def forget(self, seq: int) -> Unit | None:
        with self._lock:
            return self._unacked.pop(seq, None)

    def unit(self, seq: int) -> Unit | None:
        with self._lock:
            return self._unacked.get(seq)

    def pending(self) -> int:
        with self._lock:
            return len(self._unacked)

    def close(self, timeout: float = 2.0) -> None:
        self._stop.set()
        with self._lock:
            if self._queue is not None:
                self._queue.put(END)
            call = self._call
        if call is not None:
            call.cancel()
        if self._thread.is_alive():  # never started (a service stopped before it started): nothing to join
            self._thread.join(timeout)

    # ----------------------------------------------------------- connection
    def _run(self) -> None:
        backoff = Backoff()
        index = 0
        while not self._stop.is_set():
            address = self.parents[index % len(self.parents)]
            channel = make_channel(address, self.security)
            if not self._ready(channel):
                if self._stop.is_set():
                    # grpc's connectivity poller watches the channel in 0.2 s slices and raises on its own
                    # thread if the channel is closed (or freed at exit) under it: let it see it was cancelled.
                    time.sleep(POLLER_SLICE_S)
                    channel.close()
                    break
                channel.close()
                index += 1  # try the fallback next
                self._stop.wait(backoff.next_delay())
                continue
            try:
                self._stream(channel, address)
                backoff.reset()
            except grpc.RpcError as exc:
                if not self._stop.is_set():
                    log.warning("stream to parent %s broke: %s", address, _describe(exc))
                    index += 1 if exc.code() == grpc.StatusCode.UNAVAILABLE else 0
            finally:
                with self._lock:
                    self._queue, self._call, self.connected_to = None, None, None
                channel.close()
            self._stop.wait(backoff.next_delay())

    def _ready(self, channel: grpc.Channel) -> bool:
        """Wait for the channel to connect, up to connect_timeout_s, but no longer than until close()."""
        ready = grpc.channel_ready_future(channel)
        deadline = time.monotonic() + self.connect_timeout_s
        while not self._stop.is_set():
            try:
                ready.result(timeout=min(0.1, max(0.0, deadline - time.monotonic())))
                return True
            except grpc.FutureTimeoutError:
                if time.monotonic() >= deadline:
                    break
        ready.cancel()
        return False

    def _stream(self, channel: grpc.Channel, address: str) -> None:
        stub = forward_pb2_grpc.CollectorStub(channel)
        outgoing: queue.SimpleQueue[Any] = queue.SimpleQueue()  # put and get in C
        with self._lock:
            outgoing.put(forward_pb2.SummaryBatch(sender_id=self.sender_id, seq=0))
            backlog = [self._unacked[seq].message for seq in sorted(self._unacked)]
            if self.connections and backlog:
                self.resent += len(backlog)
                log.info("resending %d unacknowledged units to %s", len(backlog), address)
            for message in backlog:
                outgoing.put(message)
            self._queue = outgoing
            self.connections += 1
            self.connected_to = address

        call = stub.Forward(until_end(outgoing), metadata=call_metadata(self.security))
        with self._lock:
            self._call = call
        if self._stop.is_set():  # close() came while this stream was being opened, and did not see it
            call.cancel()
        try:
            for ack in call:
                if ack.capture_requests and self.on_requests is not None:
                    self.on_requests(list(ack.capture_requests))
                if ack.seq == 0:
                    continue
                with self._lock:
                    unit = self._unacked.get(ack.seq)
                if unit is not None:
                    self._on_ack(unit, ack)
        finally:
            outgoing.put(END)


def _describe(exc: grpc.RpcError) -> str:
    try:
        return f"{exc.code().name}: {exc.details()}"
    except Exception:  # a cancelled call may carry neither
        return str(exc)
