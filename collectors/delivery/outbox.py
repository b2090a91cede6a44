"""The sending side of a tier: numbered units kept until the parent says they are durable (DESIGN §5).

A coroutine on the process's client loop (collectors/delivery/clientloop.py: grpc.aio, one loop thread for
every outbox of the process, nothing polled) owns the Forward stream to the parent. After any break it
reconnects with jittered backoff (to the fallback parent when the primary
does not answer) and resends every unit not yet acknowledged DURABLE; the
parent's overlap rules make that resend safe. Retaining, resending in order
and the reconnect loop are the tree's one `telemetry.retaining.RetainingStream`
(the SDK's sender uses it too); this module says how a tier connects (a list
of parents to fail over between) and hands the parent's acks to its callbacks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from collectors.common.transport import Security, call_metadata, make_aio_channel
from collectors.delivery.clientloop import ClientLoop, LoopRequests, shared_loop
from telemetry.backoff import Backoff
from telemetry.ratelog import RateLimitedLog
from telemetry.retaining import RetainingStream, Unreachable
from telemetry.streams import END, rpc_code
from telemetry.v1 import forensics_pb2, forward_pb2, forward_pb2_grpc

log = logging.getLogger(__name__)

UNREACHABLE_WARN_EVERY_S = 30.0  # while no parent answers, how often the tier says so
DEFAULT_OUTBOX_BYTES = 256 << 20  # --outbox-budget-mb: what a tier keeps for its parent while it is away


@dataclass
class Unit:
    seq: int
    message: forward_pb2.SummaryBatch
    payload: object  # the node's own record of what the unit holds (its OutParts)
    nbytes: int = 0  # what it weighs against the outbox's budget: its wire size (estimated by the caller)


def _nbytes(unit: Unit) -> int:
    return unit.nbytes


class Outbox:
    """Numbered, retained, resent units to a parent; callbacks run on the client loop's thread (briefly: the
    process's other outboxes share it).

    Bounded in bytes (`max_bytes`: the units' wire sizes; --outbox-budget-mb): past it the oldest units are
    dropped, counted (`dropped_units`, `dropped_bytes`; the node counts their windows as dropped_windows and
    tells their senders), the newest always kept."""

    def __init__(self, sender_id: str, parents: list[str], security: Security | None,
                 on_ack: Callable[[Unit, forward_pb2.Ack], None],
                 max_bytes: int = DEFAULT_OUTBOX_BYTES, on_drop: Callable[[Unit], None] | None = None,
                 connect_timeout_s: float = 2.0, warn_every_s: float = UNREACHABLE_WARN_EVERY_S) -> None:
        if not parents:
            raise ValueError("an outbox needs at least one parent address")
        if max_bytes < 1:
            raise ValueError(f"an outbox budget of {max_bytes} bytes holds nothing")
        self.sender_id = sender_id
        self.parents = parents
        self.security = security
        self._on_ack = on_ack
        self.on_drop = on_drop
        # Capture requests the parent sends down (on Acks with seq 0); called on the client loop.
        self.on_requests: Callable[[list[forensics_pb2.CaptureRequest]], None] | None = None
        # Whether `on_ack` wants plain RECEIVED acks (no rejections); False: each stream opens with skip_received and
        # a parent that knows it sends none (forward.proto). Upstream acts on DURABLE and rejections only.
        self.received_acks = True
        self.max_bytes = max_bytes
        self.connect_timeout_s = connect_timeout_s
        # Its lock guards connected_to too.
        self._unacked: RetainingStream[Unit] = RetainingStream(_nbytes)
        self._stop = threading.Event()
        self._loop: ClientLoop | None = None
        self._future: concurrent.futures.Future[None] | None = None  # the session loop's, once started
        self._done = threading.Event()  # the session loop ended (its last channel closed)
        self._index = 0  # of the parent to connect to next (modulo the list)
        self.connected_to: str | None = None
        self.resent = 0
        self.dropped_units = 0
        self.dropped_bytes = 0
        self._drop_log = RateLimitedLog(log)
        self.connections = 0
        # No parent answers: said at once, then every warn_every_s until one does (and then that it does).
        self._unreachable_log = RateLimitedLog(log, warn_every_s)
        self._unreachable_since: float | None = None

    def start(self) -> None:
        self._loop = shared_loop()
        self._future = asyncio.run_coroutine_threadsafe(self._run(), self._loop.loop)

    def submit(self, message: forward_pb2.SummaryBatch, payload: object, nbytes: int | None = None) -> Unit:
        """Number, retain and send a unit (sent on the current stream, or on the next one). `nbytes`: its wire
        size if the caller knows it (Upstream adds it up as it builds the message); else measured here
        (ByteSize() serialises: ~4x a SerializeToString of the unit)."""
        size = message.ByteSize() if nbytes is None else nbytes

        def number(seq: int) -> Unit:
            message.sender_id = self.sender_id
            message.seq = seq
            return Unit(seq, message, payload, size)

        unit, dropped = self._unacked.add(number, self.max_bytes)
        for lost in dropped:
            self.dropped_units += 1
            self.dropped_bytes += lost.nbytes
            self._drop_log.warn("outbox over its budget (%d bytes, --outbox-budget-mb): dropped unit %d (%d windows, "
                                "%d bytes; %d units dropped so far)", self.max_bytes, lost.seq,
                                len(lost.message.windows), lost.nbytes, self.dropped_units)
            if self.on_drop:
                self.on_drop(lost)
        return unit

    def forget(self, seq: int) -> Unit | None:
        return self._unacked.settle(seq)

    def unit(self, seq: int) -> Unit | None:
        return self._unacked.get(seq)

    def pending(self) -> int:
        return len(self._unacked)

    def close(self, timeout: float = 2.0) -> None:
        """Stop: end the stream (the parent sees it end), cancel the session, and wait up to `timeout` for its
        channel to close (a warning if it does not: the session may still be sending)."""
        self._stop.set()  # first: a session that opens its stream after the END below went nowhere sees it
        self._unacked.send(END)
        future = self._future
        if future is not None:  # never started (a service stopped before it started): nothing to wait for
            future.cancel()  # cancels the session's task on the loop, wherever it waits
            if not self._done.wait(timeout):
                log.warning("outbox to %s: its session did not end within %.1f s of close(); it may still be "
                            "sending", self.connected_to or ", ".join(self.parents), timeout)

    # ----------------------------------------------------------- connection (on the process's client loop)
    async def _run(self) -> None:
        """RetainingStream.run's session loop, on the loop: sessions with the one Backoff between them."""
        backoff = Backoff()
        try:
            while not self._stop.is_set():
                try:
                    await self._session()
                    backoff.reset()
                except Exception as exc:
                    self._failed(exc)
                finally:
                    self._unacked.detach()
                if not self._stop.is_set():
                    await asyncio.sleep(backoff.next_delay())
        finally:
            self._done.set()

    def _failed(self, exc: Exception) -> None:
        """A session ended in error: log it, and try the next parent if this one was not there."""
        if isinstance(exc, Unreachable):
            self._unreachable()
            self._index += 1  # try the fallback next
        elif not isinstance(exc, grpc.RpcError):
            log.error("outbox to parent %s failed", self.parents[self._index % len(self.parents)], exc_info=exc)
        elif not self._stop.is_set():
            log.warning("stream to parent %s broke: %s", self.parents[self._index % len(self.parents)],
                        _describe(exc))
            self._index += 1 if rpc_code(exc) == grpc.StatusCode.UNAVAILABLE else 0

    def _unreachable(self) -> None:
        """No parent answered: say which, for how long, and what it costs, until one does."""
        now = time.monotonic()
        if self._unreachable_since is None:
            self._unreachable_since = now
        tried = ", ".join(self.parents)
        self._unreachable_log.warn(
            "cannot reach the parent (tried %s for %.0f s): nothing this node sends becomes durable until one "
            "answers (%d units kept meanwhile); check --parent/--fallback-parent and that the collector there "
            "is running (telemetry doctor)", tried, now - self._unreachable_since, len(self._unacked))

    async def _session(self) -> None:
        address = self.parents[self._index % len(self.parents)]
        channel = make_aio_channel(address, self.security)
        try:
            try:
                await asyncio.wait_for(channel.channel_ready(), self.connect_timeout_s)
            except TimeoutError:
                raise Unreachable(f"parent {address} not reachable") from None
            if self._stop.is_set():
                # close() came as the wait ended: Python 3.11's wait_for returns the result and swallows the
                # cancel when both land in one pass of the loop, so this check is what ends the session.
                return
            await self._stream(channel, address)
        finally:
            with self._unacked.lock:
                self.connected_to = None
            await channel.close()

    async def _stream(self, channel: grpc.aio.Channel, address: str) -> None:
        stub = forward_pb2_grpc.CollectorStub(channel)

        def opened(resent: int) -> None:  # under the lock, as the stream goes live
            if self._unreachable_since is not None:
                log.warning("parent %s answers now, after %.0f s without one; sending the %d units kept meanwhile",
                            address, time.monotonic() - self._unreachable_since, resent)
                self._unreachable_since = None
            if self.connections and resent:
                self.resent += resent
                log.info("resending %d unacknowledged units to %s", resent, address)
            self.connections += 1
            self.connected_to = address

        assert self._loop is not None
        outgoing = self._unacked.open_on(LoopRequests(self._loop),
                                         [forward_pb2.SummaryBatch(sender_id=self.sender_id, seq=0,
                                                                   skip_received=not self.received_acks)], opened)
        if self._stop.is_set():  # close() came as the stream was opened: its END found no live stream
            return
        call = stub.Forward(outgoing.__aiter__(), metadata=call_metadata(self.security))
        try:
            async for ack in call:  # waits on the stream: nothing wakes until an ack comes or the stream ends
                self._ack(ack)
        finally:
            outgoing.put(END)
            call.cancel()

    def _ack(self, ack: forward_pb2.Ack) -> None:
        if ack.capture_requests and self.on_requests is not None:
            self.on_requests(list(ack.capture_requests))
        if ack.seq == 0:
            return
        unit = self._unacked.get(ack.seq)
        if unit is not None:
            self._on_ack(unit, ack)


def _describe(exc: grpc.RpcError) -> str:
    try:
        return f"{exc.code().name}: {exc.details()}"
    except Exception:  # a cancelled call may carry neither
        return str(exc)
