"""Bounds that hold (issue 27 item 3): a stream's reply queue, the event log's per-job counts, the outbox in
bytes."""

from __future__ import annotations

import os
import time

import grpc
import numpy as np
import pytest
from pyroaring import BitMap

import telemetry
from collectors.common import aioserve
from collectors.detectors.events import EventLog
from helpers_tree import make_agent, stop_all, summary_of, wait_for
from stub_outbox import StubOutbox
from telemetry.v1 import forward_pb2, ingest_pb2, ingest_pb2_grpc


@pytest.fixture
def few_answers(monkeypatch):
    monkeypatch.setattr(aioserve, "MAX_ANSWERS", 64)


def test_a_peer_that_reads_no_acknowledgements_is_cut_not_buffered_forever(tmp_path, few_answers):
    """A rank stream that sends batch after batch and reads none of its RankAcks: before, every ack waited in
    the stream's unbounded queue once gRPC's flow-control window was full; now the stream is cut (counted)
    and the server's memory for it is bounded."""
    agent = make_agent(["127.0.0.1:9"], tmp_path / "a.sock", "agent0")  # no parent answers: nothing is ever durable
    # No BDP probing: the flow-control window stays at gRPC's 64 KiB, so the server's writes block after a few
    # thousand acks (the answers past that are what the bound is about).
    channel = grpc.insecure_channel(f"unix:{tmp_path / 'a.sock'}", options=[("grpc.http2.bdp_probe", 0)])
    call = None
    try:
        stub = ingest_pb2_grpc.AgentStub(channel)

        def requests():
            yield ingest_pb2.RankMessage(hello=ingest_pb2.RankHello(job="deaf", rank=0, world_size=1,
                                                                    pid=os.getpid()))
            for seq in range(1, 40_001):
                yield ingest_pb2.RankMessage(batch=ingest_pb2.RankBatch(job="deaf", rank=0, seq=seq))
        call = stub.Stream(requests())  # its answers are never read
        wait_for(lambda: agent.grpc.host.answers_cut, 30, what="the deaf stream to be cut")
        assert agent.grpc.host.answers_cut == 1
        # The agent goes on serving everyone else.
        run = telemetry.init(job="fine", rank=0, world_size=1, agent=f"unix:{tmp_path / 'a.sock'}",
                             last_words=False, captures=False)
        try:
            assert run.wait_connected(10)
        finally:
            run.close(0.1)
    finally:
        if call is not None:
            call.cancel()
        channel.close()
        stop_all(agent)


def test_event_totals_forget_a_finished_job_and_come_back_from_the_table(tmp_path):
    """EventLog kept a count per (job, kind) for every job ever run; a finished job's go (its events stay in
    the table) and are counted from the table again should the job come back, or after a restart."""
    db = tmp_path / "events.db"
    events = EventLog(db)
    for job in ("a", "b"):
        events.raise_("hang", job, step=1)
        events.clear("hang", job)
        events.raise_("hang", job, step=2)
    events.raise_("crash", "a", step=3)
    assert events.totals() == {("a", "hang"): 2, ("a", "crash"): 1, ("b", "hang"): 2}
    events.close_job("a")
    assert events.totals() == {("b", "hang"): 2}, "a finished job's counts are forgotten"
    events.raise_("hang", "a", step=9)
    assert events.totals()[("a", "hang")] == 3, "counted from the table when the job comes back"
    events.close()
    again = EventLog(db)  # a restart: only jobs with an event open are loaded; others when they raise again
    assert again.totals() == {("a", "hang"): 3, ("a", "crash"): 1, ("b", "hang"): 2}
    again.close_job("a")
    again.close_job("b")
    assert again.totals() == {}
    again.close()


# ---------------------------------------------------------------- the outbox, in bytes
def test_upstream_weighs_a_unit_by_its_wire_size_without_serialising_it_twice():
    """The outbox's budget is in bytes: Upstream adds up each window's summary bytes (which to_proto parses
    anyway) and the small parts' sizes, instead of ByteSize() (a second serialisation of a unit that can hold
    megabytes). The estimate is within 10 % of the real size, for small and wide windows."""
    from collectors.common.keys import Key
    from collectors.delivery.node import Node, RankView, Upstream
    from collectors.delivery.windows import Deadlines, Part

    node = Node("agent0", Deadlines(), ack_down=lambda *a, **k: None)
    outbox = StubOutbox()
    node.sink = Upstream(node, lambda on_ack: outbox)
    node.complete = lambda win: True
    node.own_ranks = {"j": RankView(alive=BitMap(range(1024)), world_size=1024,
                                    hosts={r: "host-a" for r in range(1024)})}
    rng = np.random.default_rng(0)
    for metric, sources in (("narrow", 8), ("wide", 1024)):
        for step in range(20):
            node.offer(Part(Key("j", metric, step), [("r", step)], BitMap(range(sources)),
                            built=summary_of({r: float(v) for r, v in enumerate(rng.random(sources))})), sources)
    node.flush()
    (unit,) = outbox.units
    real = unit.message.ByteSize()
    assert abs(unit.nbytes - real) <= 0.1 * real, (unit.nbytes, real)


def test_the_outbox_budget_is_in_bytes_one_big_unit_weighs_many_small(tmp_path):
    """Past the budget, the oldest units go however many they are: one unit of 64 windows weighs as much as
    64 units of one, and goes as soon as the small ones that follow fill the budget."""
    from collectors.delivery.outbox import Outbox
    from helpers_tree import window

    def unit(steps):
        return forward_pb2.SummaryBatch(windows=[window("ob", "loss", s, {0: 1.0}) for s in steps])
    small = unit([1]).ByteSize()
    dropped: list[int] = []
    outbox = Outbox("bounded", ["127.0.0.1:9"], None, lambda u, a: None, max_bytes=70 * small,
                    on_drop=lambda u: dropped.append(u.seq))  # never started: nothing leaves
    outbox.submit(unit(range(64)), payload=[])
    for step in range(10):
        outbox.submit(unit([100 + step]), payload=[])
    assert dropped == [1], "the big unit went, not ten small ones"
    assert outbox.dropped_bytes == unit(range(64)).ByteSize()
    assert outbox.pending() == 10


# ---------------------------------------------------------------- event sinks: flush and shutdown
def test_an_event_sinks_queue_is_delivered_at_shutdown_not_lost():
    """EventLog.close() used to close the table and leave the sinks' queues to daemon threads that die with
    the process: a root stopped right after raising events never posted them. Now close() delivers what is
    queued (bounded), and what cannot go in time is counted as dropped."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from collectors.detectors.sinks import WebhookSink

    received: list[str] = []

    class Slow(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            time.sleep(0.05)  # a webhook that takes its time
            received.append(body["event"]["job"])
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sink = WebhookSink(f"http://127.0.0.1:{server.server_address[1]}/hook")
        events = EventLog(None, sinks=[sink])
        for n in range(10):
            events.raise_("hang", f"job{n}", step=1)
        events.close(timeout=10)
        assert len(received) == 10 and sink.sent == 10 and sink.dropped == 0, (received, sink.dropped)
        assert events.sink_counts() == [("WebhookSink:0", 10, 0, 0)]

        late = WebhookSink(f"http://127.0.0.1:{server.server_address[1]}/hook")
        events = EventLog(None, sinks=[late])
        for n in range(20):
            events.raise_("hang", f"late{n}", step=1)
        events.close(timeout=0.2)  # not enough for 20 x 50 ms: the rest is counted, and close() does not wait
        assert late.sent + late.dropped >= 19 and late.dropped > 0, (late.sent, late.dropped)
    finally:
        server.shutdown()
