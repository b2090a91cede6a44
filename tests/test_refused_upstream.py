"""Nothing a tier refuses or drops is reported durable (issue 14, items "one window with k=3 fixes the job's
summary shape" and "the parent rejects a batch").

A window refused above the agent (a bad input there, a full buffer) is never stored: every sender that fed it
hears it was refused, down to the ranks, whose close() is then not True and whose run.stats count it; the
holds it took are released (nothing leaks), and the refusal is counted once, where it happened.
Real servers throughout: a root, optionally a rack, an agent on a Unix socket, SDK ranks.
"""

from __future__ import annotations

import time

import pytest

import telemetry
from collectors.common.keys import Key
from helpers_tree import RawChild, make_agent, make_collector, make_root, steps, stop_all, wait_for
from telemetry import Summary
from telemetry.v1 import forward_pb2

STEPS = 4


def _ranks(agent, job: str, world: int = 2) -> list:
    runs = [telemetry.init(job=job, rank=r, world_size=world, agent=f"unix:{agent.socket_path}") for r in range(world)]
    assert all(run.wait_connected(10) for run in runs)
    return runs


def _close(runs: list, timeout: float = 10.0) -> list[bool]:
    deadline = time.monotonic() + timeout
    return [run.close(max(0.1, deadline - time.monotonic())) for run in runs]


@pytest.mark.parametrize("via", ["agent_to_root", "through_a_rack"])
def test_windows_the_root_refuses_reach_the_ranks_as_refused_and_release_every_hold(tmp_path, via):
    """The root's metric cap is below the agent's, and full before the job starts: the root refuses every
    `extra` window. The ranks' close() is False with their batches counted as refused; `loss` is stored
    exactly; no tier keeps a hold; the refusal is counted once (at the root), not once per tier it passes."""
    known = {"loss", "progress.current_step", "progress.steps_completed"}  # what the ranks send besides `extra`
    root = make_root(tmp_path / "root.db", max_metrics_per_job=len(known))
    root.service.budget.admit_all("capped", known)
    rack = make_collector([root.address], "rack0") if via == "through_a_rack" else None
    agent = make_agent([(rack or root).address], tmp_path / "a.sock", "agent0")
    runs: list = []
    try:
        runs = _ranks(agent, "capped")
        for step in range(1, STEPS + 1):
            for rank, run in enumerate(runs):
                run.log(step, loss=float(step + rank))
                if step == 2:
                    run.log(step, extra=1.0)  # only step 2's batch carries the refused metric
                run.end_step(step)
        assert _close(runs) == [False, False], "close() is True only when everything the rank logged is stored"
        for run in runs:
            assert run.stats["refused_batches"] >= 1, run.stats
            assert run.stats["unacknowledged_batches"] == 0, "every batch was settled: durable or refused"
        assert [(r["step"], r["count"]) for r in steps(root.api_address, "capped", "loss")] == [
            (s, 2) for s in range(1, STEPS + 1)]
        assert steps(root.api_address, "capped", "extra") == []
        for server in (agent, rack):
            if server is not None:
                wait_for(lambda s=server: s.node.durability.outstanding() == 0, 5, what="every hold released")
                assert server.upstream.outbox.pending() == 0
        assert root.node.counters["bad_inputs"] >= 1, "the refusal is counted where it happened"
        assert [s.node.counters["bad_inputs"] for s in (agent, rack) if s is not None] == [0] * (1 + bool(rack)), \
            "... and not again by every tier below (the root's counters sum the subtree's)"
    finally:
        for run in runs:
            run.close(0.1)
        stop_all(agent, rack, root)


def test_a_rogue_first_window_of_another_shape_fixes_nothing(tmp_path):
    """A window with k=3 sent first for a job is refused on its own; the real job that follows is stored
    whole and its ranks' close() is True (before: the job's shape was fixed to k=3, every real window was
    refused, and close() still said True)."""
    root = make_root(tmp_path / "root.db")
    agent = make_agent([root.address], tmp_path / "a.sock", "agent0")
    rogue = RawChild(root.address, "rogue")
    runs: list = []
    try:
        rogue.ack()
        odd = Summary(k=3)
        odd.add(999.0, 0)
        seq = rogue.batch(forward_pb2.WindowSummary(key=Key("real", "loss", 1).to_proto(), summary=odd.to_proto(),
                                                    expected=2))
        ack = rogue.ack()
        assert ack.seq == seq and [r.index for r in ack.rejections] == [0], "the odd-shaped window is refused"
        assert "k=3" in ack.rejections[0].reason
        runs = _ranks(agent, "real")
        for step in range(1, STEPS + 1):
            for rank, run in enumerate(runs):
                run.log(step, loss=float(step + rank))
                run.end_step(step)
        assert _close(runs) == [True, True]
        assert [(r["step"], r["count"], r["max"]) for r in steps(root.api_address, "real", "loss")] == [
            (s, 2, float(s + 1)) for s in range(1, STEPS + 1)]
        # The odd window, and the rogue's claim on rank 0 (its rank states named it first), taken by the agent
        # that names the rank's process (collectors/delivery/coverage.py).
        assert root.node.counters["bad_inputs"] == 2
    finally:
        rogue.close()
        for run in runs:
            run.close(0.1)
        stop_all(agent, root)

