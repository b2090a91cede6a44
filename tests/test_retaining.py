"""telemetry.retaining: the retain-and-resend core that the SDK's Sender and a tier's Outbox share.

The ledger and session loop on their own, then both clients over real gRPC against fake servers on
127.0.0.1 (port 0): in-order resend of exactly what was not acknowledged after a break, the SDK giving up
only when the agent refuses the rank before registering it, and an outbox failing over to its next parent.
Every wait is bounded.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from collectors.delivery.outbox import Outbox, Unit
from helpers_tree import dead_address, wait_for
from telemetry.retaining import RetainingStream, Unreachable, read_acks, wait_ready
from telemetry.sdk.sender import Identity, Sender
from telemetry.streams import END
from telemetry.v1 import forensics_pb2, forward_pb2, forward_pb2_grpc, ingest_pb2, ingest_pb2_grpc

pytestmark = pytest.mark.timeout(60)


def drained(live: queue.SimpleQueue[Any]) -> list[Any]:
    out = []
    while True:
        try:
            out.append(live.get_nowait())
        except queue.Empty:
            return out


@dataclass
class Item:
    seq: int
    message: forward_pb2.SummaryBatch
    weight: int = 1


def item(seq: int, weight: int = 1) -> Item:
    return Item(seq, forward_pb2.SummaryBatch(seq=seq), weight)


# ---------------------------------------------------------------- the ledger
def test_units_are_numbered_from_one_retained_until_settled_and_resent_in_order() -> None:
    stream: RetainingStream[Item] = RetainingStream()
    for _ in range(4):
        stream.add(item, bound=100)
    assert len(stream) == 4 and stream.get(2) is not None
    assert stream.settle(2) is not None and stream.settle(2) is None
    hello = forward_pb2.SummaryBatch(seq=0)
    seen: list[int] = []
    live = stream.open([hello], seen.append)
    assert seen == [3], "then() is told how many retained units the new stream carries"
    stream.add(item, bound=100)  # live: goes after the backlog
    assert [m.seq for m in drained(live)] == [0, 1, 3, 4, 5]
    assert stream.send(forward_pb2.SummaryBatch(seq=99)) and drained(live)[0].seq == 99
    stream.detach()
    stream.add(item, bound=100)
    assert not stream.send(forward_pb2.SummaryBatch(seq=99)) and drained(live) == []
    assert [m.seq for m in drained(stream.open([]))] == [1, 3, 4, 5, 6]


def test_the_bound_drops_the_oldest_by_weight_never_the_newest() -> None:
    stream: RetainingStream[Item] = RetainingStream(lambda unit: unit.weight)
    assert stream.add(lambda seq: item(seq, 4), bound=10)[1] == []
    assert stream.add(lambda seq: item(seq, 4), bound=10)[1] == []
    unit, dropped = stream.add(lambda seq: item(seq, 4), bound=10)
    assert unit.seq == 3 and [d.seq for d in dropped] == [1] and stream.weight == 8
    unit, dropped = stream.add(lambda seq: item(seq, 50), bound=10)  # heavier than the bound alone: kept
    assert [d.seq for d in dropped] == [2, 3] and len(stream) == 1 and stream.weight == 50
    assert stream.settle(4) is not None and stream.weight == 0
    stream.add(lambda seq: item(seq, 3), bound=10)
    assert [u.seq for u in stream.clear()] == [5] and len(stream) == 0 and stream.weight == 0


def test_a_stream_opened_while_units_are_added_carries_each_once_in_order() -> None:
    """Adds race opens: each stream carries the backlog, then what was added until the next opened, each unit
    once and in order (nothing is settled here, so 1, 2, 3, ... with no gap)."""
    stream: RetainingStream[Item] = RetainingStream()
    done = threading.Event()
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # interleave the two threads finely

    def adder() -> None:
        for _ in range(20_000):
            stream.add(item, bound=1_000_000)
        done.set()

    thread = threading.Thread(target=adder)
    lives = []
    try:
        thread.start()
        for _ in range(2_000):
            if done.is_set():
                break
            before = len(stream)
            lives.append((before, stream.open([])))
            time.sleep(0.0002)
        thread.join(30)
    finally:
        sys.setswitchinterval(switch)
    assert not thread.is_alive()
    stream.detach()
    assert len(lives) >= 3, "the adder finished before streams opened under it"
    for before, live in lives:
        seqs = [m.seq for m in drained(live)]
        assert len(seqs) >= before, "a unit added before the stream opened is not on it"
        assert seqs == list(range(1, len(seqs) + 1)), "a unit missing, twice or out of order on one stream"


# ---------------------------------------------------------------- the session loop
def test_run_backs_off_between_sessions_resets_after_one_that_worked_and_stops() -> None:
    stream: RetainingStream[Item] = RetainingStream()
    stop = threading.Event()
    outcomes = iter(["unreachable", "unreachable", "unreachable", "ok", "boom", "stop"])
    errors: list[Exception] = []
    delays: list[float] = []

    def session() -> None:
        stream.open([])
        outcome = next(outcomes)
        if outcome == "unreachable":
            raise Unreachable("nobody there")
        if outcome == "boom":
            raise RuntimeError("a callback failed")
        if outcome == "stop":
            stop.set()

    def failed(exc: Exception) -> bool:
        errors.append(exc)
        return True

    def pause(delay: float) -> None:
        assert not stream.send(forward_pb2.SummaryBatch()), "the live stream is detached after each session"
        delays.append(delay)

    assert stream.run(stop, session, failed, pause) is True
    assert [type(e).__name__ for e in errors] == ["Unreachable", "Unreachable", "Unreachable", "RuntimeError"]
    assert isinstance(errors[0], grpc.RpcError) and errors[0].code() == grpc.StatusCode.UNAVAILABLE
    assert delays[0] <= 0.05 and delays[2] > 0.05, "the backoff grows while sessions fail"
    assert delays[3] <= 0.05, "a session that worked resets the backoff"
    assert len(delays) == 5, "no pause after the session that stopped"


def test_run_gives_up_when_failed_says_so_and_returns_at_once_on_stop() -> None:
    stream: RetainingStream[Item] = RetainingStream()
    stop = threading.Event()
    calls = []

    def refused() -> None:
        calls.append(1)
        raise Unreachable("refused")

    assert stream.run(stop, refused, lambda exc: False) is False and calls == [1]
    stop.set()
    started = time.monotonic()
    assert stream.run(stop, refused, lambda exc: True) is True and calls == [1]
    assert time.monotonic() - started < 1.0


def test_the_default_pause_returns_as_soon_as_stop_is_set() -> None:
    stream: RetainingStream[Item] = RetainingStream()
    stop = threading.Event()
    result: list[bool] = []

    def never() -> None:
        raise Unreachable("never")

    thread = threading.Thread(target=lambda: result.append(stream.run(stop, never, lambda exc: True)))
    thread.start()
    time.sleep(0.5)  # the backoff is past 0.2 s by now
    started = time.monotonic()
    stop.set()
    thread.join(5)
    assert not thread.is_alive() and result == [True]
    assert time.monotonic() - started < 1.5, "waits at most one backoff delay (<= 2 s) and returns on stop"


def test_wait_ready_is_bounded_by_its_timeout_and_by_stop() -> None:
    stop = threading.Event()
    channel = grpc.insecure_channel(dead_address())  # nothing listens there
    try:
        started = time.monotonic()
        assert wait_ready(channel, 0.3, stop) is False
        assert 0.25 <= time.monotonic() - started < 2.0
        stop.set()
        started = time.monotonic()
        assert wait_ready(channel, 30.0, stop) is False
        assert time.monotonic() - started < 0.5
    finally:
        time.sleep(0.25)  # grpc's connectivity poller raises on its thread if the channel closes under it
        channel.close()


# ---------------------------------------------------------------- over real gRPC
class FakeParent(forward_pb2_grpc.CollectorServicer):
    """Records each Forward stream's seqs. Stream 1 acks DURABLE seq 1 only, then breaks (UNAVAILABLE) after
    `break_after` units; later streams ack every unit DURABLE. Sends a capture request with seq 0."""

    def __init__(self, break_after: int) -> None:
        self.break_after = break_after
        self.streams: list[list[int]] = []

    def Forward(self, request_iterator: Iterator[forward_pb2.SummaryBatch],
                context: grpc.ServicerContext) -> Iterator[forward_pb2.Ack]:
        seqs: list[int] = []
        self.streams.append(seqs)
        first = len(self.streams) == 1
        for batch in request_iterator:
            seqs.append(batch.seq)
            if batch.seq == 0:
                yield forward_pb2.Ack(seq=0, capture_requests=[forensics_pb2.CaptureRequest(job="j")])
                continue
            if first:
                yield forward_pb2.Ack(seq=batch.seq, status=forward_pb2.Ack.DURABLE if batch.seq == 1
                                      else forward_pb2.Ack.RECEIVED)
                if len(seqs) > self.break_after:
                    context.abort(grpc.StatusCode.UNAVAILABLE, "parent going away")
            else:
                yield forward_pb2.Ack(seq=batch.seq, status=forward_pb2.Ack.DURABLE)


def serve(add: Callable[[grpc.Server], None]) -> tuple[grpc.Server, str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    add(server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


def test_outbox_resends_exactly_the_unacknowledged_units_in_order_after_a_break() -> None:
    parent = FakeParent(break_after=3)
    server, address = serve(lambda s: forward_pb2_grpc.add_CollectorServicer_to_server(parent, s))
    acked: list[tuple[int, int]] = []
    requests: list[str] = []
    outbox: Outbox | None = None

    def on_ack(unit: Unit, ack: forward_pb2.Ack) -> None:
        acked.append((unit.seq, ack.status))
        if ack.status == forward_pb2.Ack.DURABLE and outbox is not None:
            outbox.forget(unit.seq)

    outbox = Outbox("child", [dead_address(), address], None, on_ack, connect_timeout_s=0.3)
    outbox.on_requests = lambda reqs: requests.extend(r.job for r in reqs)
    try:
        for _ in range(3):
            outbox.submit(forward_pb2.SummaryBatch(), payload=None)
        outbox.start()  # the first parent is not there: it fails over to the second
        wait_for(lambda: len(parent.streams) >= 2 and outbox.pending() == 0, 15, what="the resend to be acked")
        assert parent.streams[0] == [0, 1, 2, 3]
        assert parent.streams[1][:3] == [0, 2, 3], "unit 1 was DURABLE; 2 and 3 are resent, in order"
        assert outbox.resent == 2 and outbox.connections == 2 and outbox.connected_to == address
        unit = outbox.submit(forward_pb2.SummaryBatch(), payload="mine")
        assert unit.seq == 4 and unit.message.sender_id == "child"
        wait_for(lambda: outbox.pending() == 0, 10, what="unit 4 to be acked")
        assert parent.streams[-1] == [0, 2, 3, 4] and requests[:2] == ["j", "j"]
    finally:
        outbox.close(2.0)
        server.stop(0)
    assert outbox.connected_to is None


class FakeAgent(ingest_pb2_grpc.AgentServicer):
    """Records each Stream's hello and batch seqs. `refuse`: abort the hello with INVALID_ARGUMENT (before
    REGISTERED); `fail_after_register`: abort with INVALID_ARGUMENT right after REGISTERED on stream 1.
    Otherwise stream 1 acks odd seqs DURABLE and ends after 4 batches; later streams ack all DURABLE."""

    def __init__(self, refuse: bool = False, fail_after_register: bool = False) -> None:
        self.refuse, self.fail_after_register = refuse, fail_after_register
        self.streams: list[list[Any]] = []

    def Stream(self, request_iterator: Iterator[ingest_pb2.RankMessage],
               context: grpc.ServicerContext) -> Iterator[ingest_pb2.RankAck]:
        seen: list[Any] = []
        self.streams.append(seen)
        first = len(self.streams) == 1
        for message in request_iterator:
            body = message.WhichOneof("body")
            if body == "hello":
                seen.append("hello")
                if self.refuse:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "rank 7 >= world size 2")
                yield ingest_pb2.RankAck(status=ingest_pb2.RankAck.REGISTERED)
                if first and self.fail_after_register:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "something else went wrong")
            elif body == "batch":
                seq = message.batch.seq
                seen.append(seq)
                if not first or seq % 2:
                    yield ingest_pb2.RankAck(status=ingest_pb2.RankAck.DURABLE, seq=seq)
                if first and len(seen) == 5:
                    return
            elif body == "bye":
                return


class Steps:
    """The Sender's drain: one batch of `values` values per call while any are queued."""

    def __init__(self) -> None:
        self.pending: queue.SimpleQueue[int] = queue.SimpleQueue()

    def push(self, step: int) -> None:
        self.pending.put(step)

    def drain(self) -> list[ingest_pb2.RankStepBatch]:
        try:
            step = self.pending.get_nowait()
        except queue.Empty:
            return []
        return [ingest_pb2.RankStepBatch(step=step, closed=True,
                                         metrics=[ingest_pb2.MetricValues(metric="loss", values=[1.0, 2.0])])]


def make_sender(address: str, steps: Steps) -> Sender:
    return Sender(Identity("job", 0, 1, 0), address, steps.drain, ingest_pb2.Heartbeat,
                  flush_interval_s=0.01, heartbeat_interval_s=10.0)


def test_sender_resends_exactly_the_unacknowledged_batches_in_order_after_a_break() -> None:
    agent = FakeAgent()
    server, address = serve(lambda s: ingest_pb2_grpc.add_AgentServicer_to_server(agent, s))
    steps = Steps()
    sender = make_sender(address, steps)
    try:
        for step in range(1, 5):
            steps.push(step)
        sender.start()
        wait_for(lambda: len(agent.streams) >= 2 and sender.unacknowledged() == 0, 15,
                 what="the resent batches to be durable")
        assert agent.streams[0] == ["hello", 1, 2, 3, 4]
        assert agent.streams[1][:3] == ["hello", 2, 4], "1 and 3 were DURABLE; 2 and 4 are resent, in order"
        steps.push(5)
        wait_for(lambda: 5 in agent.streams[-1] and sender.unacknowledged() == 0, 10, what="batch 5")
        assert sender.connected.is_set() and not sender.refused and sender.dropped_values == 0
    finally:
        sender.stop(3.0)
        server.stop(0)
    assert agent.streams[1] == ["hello", 2, 4, 5] and not sender.connected.is_set()


def test_sender_gives_up_when_the_agent_refuses_the_rank_before_registering_it() -> None:
    agent = FakeAgent(refuse=True)
    server, address = serve(lambda s: ingest_pb2_grpc.add_AgentServicer_to_server(agent, s))
    steps = Steps()
    sender = make_sender(address, steps)
    try:
        steps.push(1)
        sender.start()
        wait_for(lambda: sender.refused, 10, what="the sender to give up")
        steps.push(2)
        wait_for(lambda: sender.dropped_values == 4, 5, what="later values counted as dropped")
        assert sender.unacknowledged() == 0 and len(agent.streams) == 1
        assert not sender.send_capture(forensics_pb2.RankCapture()), "no stream once refused"
    finally:
        sender.stop(3.0)
        server.stop(0)


def test_sender_retries_an_error_that_comes_after_registering() -> None:
    agent = FakeAgent(fail_after_register=True)
    server, address = serve(lambda s: ingest_pb2_grpc.add_AgentServicer_to_server(agent, s))
    steps = Steps()
    sender = make_sender(address, steps)
    try:
        sender.start()
        wait_for(lambda: len(agent.streams) >= 2 and sender.connected.is_set(), 10, what="a second stream")
        steps.push(1)
        wait_for(lambda: sender.unacknowledged() == 0 and 1 in agent.streams[-1], 10, what="batch 1 durable")
        assert not sender.refused
    finally:
        sender.stop(3.0)
        server.stop(0)


def test_sender_stops_promptly_while_the_agent_is_unreachable() -> None:
    steps = Steps()
    sender = make_sender(dead_address(), steps)
    steps.push(1)
    sender.start()
    wait_for(lambda: sender.unacknowledged() == 1, 5, what="the batch kept while disconnected")
    started = time.monotonic()
    sender.stop(5.0)
    assert time.monotonic() - started < 2.5 and sender.unacknowledged() == 1


def test_read_acks_ends_the_requests_when_the_acks_end_or_fail() -> None:
    requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
    seen: list[int] = []
    read_acks(iter([1, 2]), seen.append, requests)
    assert seen == [1, 2] and requests.get_nowait() is END

    def broken() -> Iterator[int]:
        yield 3
        raise Unreachable("gone")

    with pytest.raises(Unreachable):
        read_acks(broken(), seen.append, requests)
    assert seen == [1, 2, 3] and requests.get_nowait() is END
