"""Coverage-bound reports (issue 26 item 1): a child speaks only for the ranks its rank states name. A rogue
child on the root's Forward port, next to a healthy job whose ranks (real SDK runs) register through a real
agent, tries every kind of report about the healthy job's ranks: values for future steps, heartbeat buckets,
fingerprints that would open a critical collective_mismatch naming an innocent rank, a forged capture, and
the same while claiming the ranks in its own rank states. Each is refused and counted; the healthy job stays
exact, its close() True, its capture the real one, and no event names its ranks."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyroaring import BitMap

import telemetry
from bench.forensics_flood import post_capture
from collectors.common.keys import Key
from helpers_tree import RawChild, api_get, counters, make_agent, make_root, steps, stop_all, summary_of, wait_for
from telemetry.v1 import forensics_pb2, forward_pb2

pytestmark = pytest.mark.timeout(90)


def _window(job: str, metric: str, index: int, values: dict, width_ms: int = 0) -> forward_pb2.WindowSummary:
    return forward_pb2.WindowSummary(key=Key(job, metric, index, width_ms).to_proto(),
                                     summary=summary_of(values).to_proto(), expected=2)


def _fingerprints(job: str, rank: int) -> forensics_pb2.JobFingerprints:
    ranks = BitMap([rank]).serialize()
    return forensics_pb2.JobFingerprints(job=job, seqs=[forensics_pb2.MergedFingerprint(
        seq=seq, min_hash=1, min_what="all_reduce", min_ranks=ranks, max_hash=2, max_what="broadcast",
        max_ranks=ranks) for seq in range(1, 4)])


def test_a_rogue_child_cannot_speak_for_a_healthy_jobs_ranks(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root.db")
    agent = rogue = None
    runs = []
    try:
        agent = make_agent([root.address], tmp_path / "a.sock", "agent-0")
        runs = [telemetry.init(job="train", rank=r, world_size=2, agent=f"unix:{tmp_path / 'a.sock'}")
                for r in range(2)]
        for step in range(3):
            for rank, run in enumerate(runs):
                run.log(step, loss=step + rank / 4)
                run.end_step(step)
        wait_for(lambda: root.liveness("train")["alive"] == 2, 15, what="both ranks at the root")
        rogue = RawChild(root.address, "rogue")
        rogue.ack()
        before = counters(root)["bad_inputs"]
        now_bucket = time.time_ns() // 1_000_000_000 * 1000
        # 1. Values for future steps and a heartbeat bucket, with no rank states.
        rogue.send(forward_pb2.SummaryBatch(sender_id="rogue", seq=1, windows=[
            _window("train", "loss", 10, {0: 999.0, 1: 999.0}),
            _window("train", "progress.current_step", now_bucket, {0: 1e9}, width_ms=1000)]))
        ack = rogue.ack_for(1, forward_pb2.Ack.REJECTED_OVERLAP)
        assert [r.index for r in ack.rejections] == [0, 1] and all(
            "does not cover" in r.reason and not r.overlapping_sources for r in ack.rejections), ack
        # 2. The same while claiming both ranks in its own rank states (without the ranks' processes).
        claim = forward_pb2.RankStates(job="train", world_size=2, alive=BitMap([0, 1]).serialize())
        rogue.send(forward_pb2.SummaryBatch(sender_id="rogue", seq=2, ranks=[claim], windows=[
            _window("train", "loss", 11, {0: 999.0})]))
        ack = rogue.ack_for(2, forward_pb2.Ack.REJECTED_OVERLAP)
        assert ["does not cover" in r.reason for r in ack.rejections] == [True], ack
        # 3. Fingerprints that would make rank 1 the odd one out: refused, no event.
        rogue.send(forward_pb2.SummaryBatch(sender_id="rogue", seq=3, ranks=[claim],
                                            fingerprints=[_fingerprints("train", 1)]))
        rogue.ack_for(3, forward_pb2.Ack.RECEIVED)
        # 4. A forged capture of rank 0 for a real on-demand request, sent before the rank's own answer.
        status, _ = post_capture(root.api_address, "train", [0])
        assert status == 202
        request_id = wait_for(lambda: next(iter(root.wiring.forensics.store.folder.glob("job-train/od-*")), None),
                              10, what="the request recorded").name
        rogue.send(forward_pb2.SummaryBatch(sender_id="rogue", seq=4, ranks=[claim], captures=[forensics_pb2.Capture(
            request_id=request_id, job="train", rank=0, source="sdk", stacks="forged", captured_at_ns=1)]))
        rogue.ack_for(4, forward_pb2.Ack.RECEIVED)

        def answered() -> dict | None:
            body = api_get(root.api_address, f"/api/v1/jobs/train/forensics/{request_id}")[1]
            return body if not body["pending"] else None
        [capture] = wait_for(answered, 20, what="rank 0's own capture")["captures"]
        assert capture["stacks"] != "forged" and "MainThread" in capture["stacks"], capture
        assert counters(root)["bad_inputs"] - before == 5, counters(root)  # 3 windows, fingerprints, capture
        # The healthy job: exact, durable, and nothing about its ranks.
        for step in range(3, 6):
            for rank, run in enumerate(runs):
                run.log(step, loss=step + rank / 4)
                run.end_step(step)
        assert all(run.close(timeout=15) for run in runs)
        rows = steps(root.api_address, "train", "loss")
        assert [(r["step"], r["count"], r["min"], r["max"]) for r in rows] == [
            (s, 2, float(s), s + 0.25) for s in range(6)]
        assert api_get(root.api_address, "/api/v1/jobs/train/events")[1]["events"] == []
    finally:
        for run in runs:
            run.close(timeout=1)
        if rogue is not None:
            rogue.close()
        stop_all(agent, root)
