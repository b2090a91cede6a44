"""Coverage-bound reports (issue 26 item 1): a child speaks only for the ranks its rank states name. A rogue
child on the root's Forward port, next to a healthy job whose ranks (real SDK runs) register through a real
agent, tries every kind of report about the healthy job's ranks: values for future steps, heartbeat buckets,
fingerprints that would open a critical collective_mismatch naming an innocent rank, a forged capture, and
the same while claiming the ranks in its own rank states. Each is refused and counted; the healthy job stays
exact, its close() True, its capture the real one, and no event names its ranks."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyroaring import BitMap

import telemetry
from bench.forensics_flood import post_capture
from collectors.common.keys import Key
from collectors.delivery.coverage import Coverage
from collectors.delivery.node import RankView
from collectors.delivery.runs import Claim, RunLedger
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


@dataclass
class Scene:
    """A real root, and what a test starts against it: a real agent with two SDK ranks of job "train", a raw
    rogue child on the root's Forward port; all stopped by the `scene` fixture whatever the test's outcome."""
    root: Any
    folder: Path
    agent: Any = None
    rogue: RawChild | None = None
    runs: list = field(default_factory=list)

    def start_agent_and_ranks(self) -> list:
        self.agent = make_agent([self.root.address], self.folder / "a.sock", "agent-0")
        self.runs = [telemetry.init(job="train", rank=r, world_size=2, agent=f"unix:{self.folder / 'a.sock'}")
                     for r in range(2)]
        return self.runs

    def start_rogue(self) -> RawChild:
        self.rogue = RawChild(self.root.address, "rogue")
        self.rogue.ack()
        return self.rogue


@pytest.fixture
def scene(tmp_path: Path) -> Iterator[Scene]:
    scene = Scene(make_root(tmp_path / "root.db"), tmp_path)
    try:
        yield scene
    finally:
        for run in scene.runs:
            run.close(timeout=1)
        if scene.rogue is not None:
            scene.rogue.close()
        stop_all(scene.agent, scene.root)


def _finish_exact(root, runs: list, first: int, last: int) -> None:
    """Steps first..last of the healthy job, then: durable, every step from 0 exact, nothing about its ranks."""
    for step in range(first, last + 1):
        for rank, run in enumerate(runs):
            run.log(step, loss=step + rank / 4)
            run.end_step(step)
    assert all(run.close(timeout=15) for run in runs)
    rows = steps(root.api_address, "train", "loss")
    assert [(r["step"], r["count"], r["min"], r["max"]) for r in rows] == [
        (s, 2, float(s), s + 0.25) for s in range(last + 1)]
    assert api_get(root.api_address, "/api/v1/jobs/train/events")[1]["events"] == []


def test_a_rogue_child_cannot_speak_for_a_healthy_jobs_ranks(scene: Scene) -> None:
    root = scene.root
    runs = scene.start_agent_and_ranks()
    for step in range(3):
        for rank, run in enumerate(runs):
            run.log(step, loss=step + rank / 4)
            run.end_step(step)
    wait_for(lambda: root.liveness("train")["alive"] == 2, 15, what="both ranks at the root")
    rogue = scene.start_rogue()
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
    _finish_exact(root, runs, 3, 5)


def test_a_child_that_named_ranks_first_loses_them_to_the_child_naming_their_processes(scene: Scene,
                                                                                         caplog) -> None:
    """Coverage is first come (issue 26): a rogue child that names a job's ranks before any agent registered them
    covers them. Once the real agent names their processes (the run ledger accepts them), the rogue no longer
    speaks for them: its later values and fingerprints are refused, the loss counted and logged naming both
    children. Before: the rogue kept covering them, and its later reports were taken."""
    root = scene.root
    rogue = scene.start_rogue()
    claim = forward_pb2.RankStates(job="train", world_size=2, alive=BitMap([0, 1]).serialize())
    rogue.send(forward_pb2.SummaryBatch(sender_id="rogue", seq=1, ranks=[claim]))
    rogue.ack_for(1, forward_pb2.Ack.RECEIVED)
    runs = scene.start_agent_and_ranks()
    for rank, run in enumerate(runs):
        run.log(0, loss=rank / 4)
        run.end_step(0)
    wait_for(lambda: len(steps(root.api_address, "train", "loss")) == 1, 15, what="the job's first step")
    before = counters(root)["bad_inputs"]
    # One line per unit that named processes: both ranks in one, or one each (the agent's timing).
    lost = re.findall(r"'rogue' no longer speaks for (\d+) rank\(s\) of job 'train' .* and 'agent-0' names the "
                      "process the run ledger accepted", caplog.text)
    assert sum(map(int, lost)) == 2, caplog.text
    rogue.send(forward_pb2.SummaryBatch(sender_id="rogue", seq=2, ranks=[claim], windows=[
        _window("train", "loss", 5, {0: 999.0, 1: 999.0})], fingerprints=[_fingerprints("train", 1)]))
    ack = rogue.ack_for(2, forward_pb2.Ack.REJECTED_OVERLAP)
    assert ["does not cover" in r.reason for r in ack.rejections] == [True], ack
    assert counters(root)["bad_inputs"] - before == 2, counters(root)  # the window, the fingerprints
    _finish_exact(root, runs, 1, 6)


def test_coverage_moves_to_the_child_naming_the_ledgers_process() -> None:
    coverage = Coverage()
    ledger = {0: 7, 1: 8}
    assert coverage.note("rogue", {"j": RankView(alive=BitMap([0, 1]), world_size=2)}, lambda job: {}) == []
    revoked = coverage.note("agent", {"j": RankView(alive=BitMap([0, 1]), world_size=2, processes={0: 7})},
                            lambda job: ledger)
    assert [(r.job, r.child, r.claimant, list(r.ranks)) for r in revoked] == [("j", "rogue", "agent", [0])]
    assert list(coverage.uncovered("rogue", "j", BitMap([0, 1]))) == [0]
    # A child that failed over names the same process under another parent: both keep the rank.
    assert coverage.note("agent-again", {"j": RankView(alive=BitMap([0]), world_size=2, processes={0: 7})},
                         lambda job: ledger) == []
    assert not coverage.uncovered("agent", "j", BitMap([0])) and not coverage.uncovered("agent-again", "j", BitMap([0]))
    # A rank named with a process the ledger did not accept proves nothing.
    assert coverage.note("liar", {"j": RankView(alive=BitMap([1]), world_size=2, processes={1: 99})},
                         lambda job: ledger) == []


def test_the_ledgers_warning_names_the_child_that_claimed_the_rank_first(caplog) -> None:
    ledger = RunLedger()
    ledger.claim("rogue", "job", {0: Claim(5, "h-rogue")})
    ledger.claim("agent-0", "job", {0: Claim(6, "h-real")})
    assert "agent-0 says 1 rank(s)" in caplog.text and "named by rogue" in caplog.text
