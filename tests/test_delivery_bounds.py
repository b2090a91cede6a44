"""Bounds that hold (issue 27 item 3): a stream's reply queue, the event log's per-job counts."""

from __future__ import annotations

import os

import grpc
import pytest

import telemetry
from collectors.common import aioserve
from collectors.detectors.events import EventLog
from helpers_tree import make_agent, stop_all, wait_for
from telemetry.v1 import ingest_pb2, ingest_pb2_grpc


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
