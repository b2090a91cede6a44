"""Steps beyond what the tree can store are refused at ingress (issue 14: "Step 2**63-1 is accepted, then breaks
the event store (OverflowError) — through the same all-jobs check loop").

The limit is 2**53 (collectors/common/validation.py MAX_INDEX): the root keeps steps in SQLite integers, its
hang detector names step + 1, and heartbeats carry steps as float64. Real servers: a root, an agent on a Unix
socket, raw rank streams and a raw child for the hostile input, SDK ranks for the healthy job.
"""

from __future__ import annotations

import os

import grpc

from collectors.common.validation import MAX_INDEX
from helpers_tree import RawChild, events, hanging_job, make_agent, make_root, steps, stop_all, wait_for, window
from telemetry.v1 import forward_pb2, ingest_pb2, ingest_pb2_grpc


def test_steps_past_the_limit_are_refused_and_a_job_at_the_limit_blinds_nobody(tmp_path):
    root = make_root(tmp_path / "root.db")
    agent = make_agent([root.address], tmp_path / "a.sock", "agent0")
    rogue = RawChild(root.address, "rogue")
    runs: list = []
    try:
        # At the agent: a rank stream with step 2**63-1 ends with INVALID_ARGUMENT, counted.
        stub = ingest_pb2_grpc.AgentStub(grpc.insecure_channel(f"unix:{agent.socket_path}"))
        messages = [
            ingest_pb2.RankMessage(hello=ingest_pb2.RankHello(job="evil", rank=0, world_size=2, host="h",
                                                              pid=os.getpid())),
            ingest_pb2.RankMessage(batch=ingest_pb2.RankBatch(job="evil", rank=0, seq=1, steps=[
                ingest_pb2.RankStepBatch(step=2**63 - 1, closed=True, metrics=[
                    ingest_pb2.MetricValues(metric="loss", values=[1.0])])]))]
        try:
            answers = list(stub.Stream(iter(messages), timeout=10))
            raise AssertionError(f"the stream must end with a status, got {answers}")
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "beyond this tree's limit of 2**53" in error.details()
        assert agent.node.counters["bad_inputs"] == 1

        # At the root: a child's window at 2**63-1 is rejected; one at exactly the limit is taken, and left
        # incomplete (rank 1 of 2 never reports), so the hang check judges a job at step 2**53.
        rogue.ack()
        seq = rogue.batch(window("evil", "loss", 2**63 - 1, {0: 1.0}, expected=2),
                          window("edge", "loss", MAX_INDEX, {0: 1.0}, expected=2))
        ack = rogue.ack_for(seq, forward_pb2.Ack.REJECTED_OVERLAP)
        assert [r.index for r in ack.rejections] == [0]
        assert "beyond this tree's limit of 2**53" in ack.rejections[0].reason

        # A healthy job next to it: exact figures, and its injected hang (rank 1 stops at step 4) is raised.
        runs = hanging_job(agent)
        hang = wait_for(lambda: events(root.api_address, "healthy", "hang"), timeout=30, what="the healthy job's hang")
        assert hang[0]["ranks"] == [1] and hang[0]["step"] == 4
        assert [(r["step"], r["count"], r["min"]) for r in steps(root.api_address, "healthy", "loss")[:3]] == [
            (s, 2, float(s)) for s in range(1, 4)]
        edge = wait_for(lambda: events(root.api_address, "edge", "hang"), timeout=30, what="the edge job's hang stored")
        assert edge[0]["step"] == MAX_INDEX
        assert root.wiring.detectors.errors == 0, "no detector check failed"
        assert steps(root.api_address, "evil", "loss") == []
    finally:
        rogue.close()
        for run in runs:
            run.close(0.1)
        stop_all(agent, root)
