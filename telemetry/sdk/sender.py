"""The SDK's background thread: batches logged values per step and streams them to the node agent.

Nothing here runs on the training thread. Batches are numbered and kept
until the agent says they are durable at the root; after a reconnect every
kept batch is resent (the agent deduplicates). The backlog is bounded: past
it (`max_backlog_bytes`, the batches' wire bytes) the oldest batches never sent are dropped, and the number of
values dropped is counted and reported to the agent in the next heartbeat and hello.
Retaining, resending in order and the reconnect loop are the tree's one
`telemetry.retaining.RetainingStream`; this module says what goes on the
stream (hello, batches, heartbeats, bye) and what the agent's acks mean.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import grpc

from telemetry.ratelog import RateLimitedLog
from telemetry.retaining import RetainingStream, Unreachable, read_acks, wait_ready
from telemetry.sdk.address import why_unreachable
from telemetry.streams import END, rpc_code, until_end
from telemetry.v1 import forensics_pb2, ingest_pb2

log = logging.getLogger("telemetry.sdk")
LATE_WARN_EVERY_S = 10.0
CONNECT_TIMEOUT_S = 1.0
UNREACHABLE_WARN_EVERY_S = 60.0

RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED,
             grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.RESOURCE_EXHAUSTED}


@dataclass
class Identity:
    job: str
    rank: int
    world_size: int
    local_rank: int
    device: str = ""
    attempt: int = 0  # RankHello.attempt


DEFAULT_BACKLOG_BYTES = 64 << 20
"""The backlog's bound, in the batches' wire bytes: 64 MiB is about 8 million plain values (a packed double is 8
bytes on the wire and about as much in memory), more when names are long and values few per metric."""


@dataclass
class Kept:
    seq: int
    message: bytes  # the batch's RankMessage, serialised once: what the bound weighs and what goes on the stream
    values: int  # what a drop counts (dropped_values)


def _nbytes(kept: Kept) -> int:
    return len(kept.message)


AGENT_STREAM = f"/{ingest_pb2.DESCRIPTOR.services_by_name['Agent'].full_name}/Stream"  # as ingest_pb2_grpc names it


def _wire(message: ingest_pb2.RankMessage | bytes) -> bytes:
    """The stream's request serialiser: a batch goes as the bytes it was weighed by (upb's ByteSize() encodes a
    message as SerializeToString() does, so the generated stub's serialiser would encode each batch a second time);
    any other message (hello, heartbeat, capture, last words, bye) as protobuf encodes it."""
    return message if isinstance(message, bytes) else message.SerializeToString()


def _agent_stream(channel: grpc.Channel) -> grpc.StreamStreamMultiCallable[ingest_pb2.RankMessage | bytes,
                                                                          ingest_pb2.RankAck]:
    """The Agent's Stream as ingest_pb2_grpc.AgentStub opens it, but for `_wire`: registered with the channel, so the
    C core looks the method up once per channel, not once per stream opened."""
    return channel.stream_stream(  # type: ignore[call-arg]  # _registered_method: grpc's keyword for generated stubs, absent from types-grpcio's Channel
        AGENT_STREAM, request_serializer=_wire, response_deserializer=ingest_pb2.RankAck.FromString,
        _registered_method=True)


class Sender:
    """Owns the stream to the agent; `drain` is called on this thread to turn buffered records into batches."""

    def __init__(self, identity: Identity, address: str, drain: Callable[[], list[ingest_pb2.RankStepBatch]],
                 heartbeat: Callable[[], ingest_pb2.Heartbeat], max_backlog_bytes: int = DEFAULT_BACKLOG_BYTES,
                 flush_interval_s: float = 0.1, heartbeat_interval_s: float = 1.0) -> None:
        self.identity = identity
        self.address = address
        self._drain = drain
        self._heartbeat = heartbeat
        self.max_backlog_bytes = max_backlog_bytes
        self.flush_interval_s = flush_interval_s
        self.heartbeat_interval_s = heartbeat_interval_s
        # The batches not yet DURABLE or REFUSED, by seq, bounded by their wire bytes (max_backlog_bytes: a value
        # count let a batch of long names and single values weigh a ninth of its bytes): past it the oldest batch
        # never sent is dropped and its values counted; one already sent is kept until the agent answers for it
        # (it may be delivered whatever happens here: counting it dropped would count it twice).
        self._kept: RetainingStream[Kept] = RetainingStream(_nbytes, keep_sent=True)
        self._lock = threading.Lock()  # the drop counters, written on the sender and the ack-reading threads
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.dropped_values = 0
        self.refused_batches = 0
        self.late_dropped_values = 0  # logged into a step after closing it; dropped by the agent
        self.incarnation = random.getrandbits(63) | 1  # this Run, across its reconnects (RankHello.incarnation)
        self._late_warned = float("-inf")
        self.refused = False  # the agent refused this rank: nothing is sent any more
        self.connected = threading.Event()
        self._registered = False  # the last stream was answered REGISTERED (an error after it is no refusal)
        self.ever_registered = False  # some stream was (close() says which of the two it was when it fails)
        self._stream_error: grpc.RpcError | None = None
        # Capture requests (RankAck.CAPTURE) go here, on the ack-reading thread: it must return at once.
        self.on_capture: Callable[[forensics_pb2.CaptureRequest], None] | None = None
        # The agent's fault file for this rank (RankAck.fault_file with REGISTERED): faulthandler goes there.
        self.on_fault_file: Callable[[str], object] | None = None
        self._noted = threading.Event()  # the agent noted the last words just sent (RankAck.NOTED)
        self._thread = threading.Thread(target=self._run, name=f"telemetry-sender-{identity.rank}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def send_capture(self, capture: forensics_pb2.RankCapture) -> bool:
        """Send a capture on the current stream (not retained: after a break the agent's own fallback
        answers for this rank); False when there is no stream."""
        return self._kept.send(ingest_pb2.RankMessage(capture=capture))

    def send_last_words(self, words: forensics_pb2.LastWords, wait_s: float) -> bool:
        """Send the rank's last words on the current stream and wait up to wait_s for the agent's NOTED; False
        at once when there is no stream (nothing is retained: the process is going away)."""
        self._noted.clear()
        if not self.connected.is_set() or not self._kept.send(ingest_pb2.RankMessage(last_words=words)):
            return False
        return self._noted.wait(wait_s) if wait_s > 0 else False

    def count_dropped(self, values: int) -> None:
        """Count values dropped before they were batched (the Run's buffer overflowed, or a refused rank's);
        under the lock the ack-reading thread counts its refusals with, so no update is lost."""
        with self._lock:
            self.dropped_values += values

    def unacknowledged(self) -> int:
        return len(self._kept)

    def forked(self) -> None:
        """In a forked child: this sender's thread and stream stayed in the parent. Nothing is sent from here;
        the locks and the retained batches (the parent's to deliver) are new and empty, so nothing waits on a
        lock a parent thread held at the fork."""
        self._lock = threading.Lock()
        self._kept = RetainingStream(_nbytes, keep_sent=True)
        self.connected = threading.Event()
        self._noted = threading.Event()
        self._stop.set()

    def stop(self, timeout: float) -> None:
        """Stop the thread after one last batch (callers wait for durability first)."""
        self._stop.set()
        self._wake.set()
        if self._thread.ident is not None and self._thread.is_alive():  # a forked child's copy never runs
            self._thread.join(timeout)

    # ---------------------------------------------------------------- thread
    def _run(self) -> None:
        if not self._kept.run(self._stop, self._session, self._failed, self._pause):
            self._give_up()
            return
        self._batch_once()

    def _failed(self, exc: Exception) -> bool:
        """A session ended in error: go on (True) unless the agent refused this rank itself."""
        if not isinstance(exc, grpc.RpcError):
            log.error("telemetry sender error", exc_info=exc)
            return True
        ident = self.identity
        if isinstance(exc, Unreachable):
            _agents.unreachable(self.address, ident.job, ident.rank)
            return True
        code = rpc_code(exc)
        permanent = code is not None and code not in RETRYABLE and code != grpc.StatusCode.ALREADY_EXISTS
        if permanent and code is not None and not self._registered:
            # The agent refused this rank itself (e.g. rank >= world size): nothing will ever be
            # delivered, so stop and count everything as dropped rather than retry forever.
            # (ALREADY_EXISTS is retried: the rank's previous process may still be exiting.)
            _agents.refused(self.address, ident.job, ident.rank, f"{code.name}: {exc.details()}")
            return False
        log.log(logging.WARNING if code not in RETRYABLE else logging.DEBUG,
                "telemetry agent stream ended: %s", exc)
        return True

    def _pause(self, delay: float) -> None:
        """Between sessions: keep batching while disconnected, so the training thread's buffer never fills."""
        end = time.monotonic() + delay
        while not self._stop.is_set() and time.monotonic() < end:
            self._batch_once()
            self._wake.wait(min(self.flush_interval_s * 5, max(0.0, end - time.monotonic())))
            self._wake.clear()

    def _give_up(self) -> None:
        dropped = self._kept.clear()
        with self._lock:
            self.dropped_values += sum(kept.values for kept in dropped)
            self.refused_batches += len(dropped)
        self.refused = True
        while not self._stop.is_set():  # keep draining so the training thread's buffer never fills
            self.count_dropped(sum(len(m.values) for s in self._drain() for m in s.metrics))
            self._wake.wait(0.5)
            self._wake.clear()

    def _session(self) -> None:
        self._registered = False
        channel = shared_channel(self.address)
        if not wait_ready(channel, CONNECT_TIMEOUT_S, self._stop):
            raise Unreachable("agent not reachable")
        stream = _agent_stream(channel)
        ident = self.identity
        hello = ingest_pb2.RankMessage(hello=ingest_pb2.RankHello(
            job=ident.job, rank=ident.rank, world_size=ident.world_size, local_rank=ident.local_rank,
            host=socket.gethostname(), pid=os.getpid(), device=ident.device, dropped=self.dropped_values,
            incarnation=self.incarnation, attempt=ident.attempt))
        outgoing = self._kept.open([hello])  # then every kept batch, in order, then each new one
        try:
            call = stream(until_end(outgoing))
            reader = threading.Thread(target=self._read_acks, args=(call, outgoing), daemon=True)
            reader.start()
            last_beat = 0.0
            while not self._stop.is_set() and reader.is_alive():
                self._batch_once()
                now = time.monotonic()
                if now - last_beat >= self.heartbeat_interval_s:
                    outgoing.put(ingest_pb2.RankMessage(heartbeat=self._beat()))
                    last_beat = now
                self._wake.wait(self.flush_interval_s)
                self._wake.clear()
            if self._stop.is_set():
                self._batch_once()
                outgoing.put(ingest_pb2.RankMessage(heartbeat=self._beat()))  # the drops counted since the last
                # Say this rank is finished (not dead), so that every tier can forget the job once all its
                # ranks did; the agent ends the stream in answer.
                outgoing.put(ingest_pb2.RankMessage(bye=ingest_pb2.RankBye()))
            outgoing.put(END)
            if self._stop.is_set():
                reader.join(1.0)
                call.cancel()
            reader.join(1.0)
        finally:
            self.connected.clear()
        if self._stream_error is not None:
            error, self._stream_error = self._stream_error, None
            raise error

    def _beat(self) -> ingest_pb2.Heartbeat:
        beat = self._heartbeat()
        beat.dropped = self.dropped_values  # so the tree counts a drop without waiting for a reconnect's hello
        return beat

    def _read_acks(self, call: Iterable[ingest_pb2.RankAck], outgoing: queue.SimpleQueue[Any]) -> None:
        self._stream_error = None
        try:
            read_acks(call, self._ack, outgoing)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                self._stream_error = exc

    def _ack(self, ack: ingest_pb2.RankAck) -> None:
        status = ack.status
        if status == ingest_pb2.RankAck.REGISTERED:
            self._registered = self.ever_registered = True
            self.connected.set()
            _agents.reached(self.address)
            if ack.fault_file and self.on_fault_file is not None:
                self.on_fault_file(ack.fault_file)
        elif status == ingest_pb2.RankAck.NOTED:
            self._noted.set()
        elif status == ingest_pb2.RankAck.DROPPED_LATE:
            self._dropped_late(ack)
        elif status == ingest_pb2.RankAck.CAPTURE:
            if self.on_capture is not None:
                self.on_capture(ack.capture)
        elif status in (ingest_pb2.RankAck.DURABLE, ingest_pb2.RankAck.REFUSED):
            kept = self._kept.settle(ack.seq)
            if kept is not None and status == ingest_pb2.RankAck.REFUSED:
                with self._lock:
                    self.refused_batches += 1
                    self.dropped_values += kept.values
                log.error("telemetry agent refused batch %d: %s", ack.seq, ack.reason)

    def _dropped_late(self, ack: ingest_pb2.RankAck) -> None:
        self.late_dropped_values += ack.dropped_values
        now = time.monotonic()
        if now - self._late_warned >= LATE_WARN_EVERY_S:
            self._late_warned = now
            log.warning("telemetry: %d value(s) dropped: %s (a step closes when the rank moves past it or "
                        "leaves run.step(); %d dropped so far)", ack.dropped_values, ack.reason,
                        self.late_dropped_values)

    def _batch_once(self) -> None:
        steps = self._drain()
        if not steps:
            return
        values = sum(len(m.values) for s in steps for m in s.metrics)
        ident = self.identity

        def batch(seq: int) -> Kept:
            return Kept(seq, ingest_pb2.RankMessage(batch=ingest_pb2.RankBatch(
                job=ident.job, rank=ident.rank, seq=seq, steps=steps)).SerializeToString(), values)

        _, dropped = self._kept.add(batch, self.max_backlog_bytes)
        if dropped:
            with self._lock:
                self.dropped_values += sum(kept.values for kept in dropped)


class _AgentWarnings:
    """What the user is told when nothing arrives, per agent address for every Run in the process (the
    simulator runs many): at most one warning a minute while the agent cannot be reached, naming the address
    and the fix; one line when it answers again; a refusal once a minute with the agent's reason."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._unreachable: dict[str, RateLimitedLog] = {}
        self._refused: dict[str, RateLimitedLog] = {}
        self._warned: set[str] = set()  # addresses warned about and not reached since

    def unreachable(self, address: str, job: str, rank: int) -> None:
        with self._lock:
            said = self._unreachable.setdefault(address, RateLimitedLog(log, UNREACHABLE_WARN_EVERY_S)).warn(
                "telemetry: cannot reach the node agent at %s (job %r, rank %d); nothing logged is delivered "
                "until it answers (values are kept meanwhile, up to the backlog bound, and close() returns False): "
                "%s", address, job, rank, why_unreachable(address))
            if said:
                self._warned.add(address)

    def reached(self, address: str) -> None:
        with self._lock:
            if address not in self._warned:
                return
            self._warned.discard(address)
        log.warning("telemetry: the node agent at %s answers now; sending what was kept", address)

    def refused(self, address: str, job: str, rank: int, reason: str) -> None:
        with self._lock:
            self._refused.setdefault(address, RateLimitedLog(log, UNREACHABLE_WARN_EVERY_S)).warn(
                "telemetry: the node agent at %s refused job %r rank %d: %s; telemetry is off for this rank "
                "(nothing it logs is delivered); fix what the agent names and restart the rank", address, job,
                rank, reason)


_agents = _AgentWarnings()
_channels: dict[str, grpc.Channel] = {}
_channels_lock = threading.Lock()


def _forget_channels() -> None:
    """In a forked child (a DataLoader worker): the parent's channels are the parent's (their sockets and gRPC
    threads did not come along), and the lock may have been held by a parent thread at the fork."""
    global _channels, _channels_lock
    _channels = {}
    _channels_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_channels)


def shared_channel(address: str) -> grpc.Channel:
    """One channel per agent address per process, never closed: every Run in the process multiplexes its
    stream over it and gRPC reconnects it by itself. (A channel per Run, created and closed on each retry,
    made gRPC's poller fail with EBADF when many Runs in one process reconnected at once.)"""
    with _channels_lock:
        channel = _channels.get(address)
        if channel is None:
            channel = _channels[address] = grpc.insecure_channel(address)
        return channel
