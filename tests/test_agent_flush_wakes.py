"""The flush loops wake when something is due (issue 28), not 50 times a second: an idle agent flushes once a second
or so (its liveness unit, each hardware sample), while a sample's windows, a rank's closed step and a step whose
deadline passed with nothing arriving still leave at once; a collector (rack or root) flushes when a unit came in and
when a window's deadline, a fleet second's cut-off or its liveness unit is due. A real root, rack and agent on
loopback and a Unix socket, the SDK in this process."""

from __future__ import annotations

import time

import pytest

import telemetry
from collectors.common import fleet
from collectors.sim.sysfs import write_host
from helpers_tree import make_agent, make_collector, make_root, steps, stop_all, wait_for

WAIT = 30.0


def _fleet_seconds(root) -> int:
    with root.store.reader() as db:
        return db.execute("SELECT count(*) FROM windows WHERE job=? AND metric='ib.port_active'",
                          (fleet.FLEET_JOB,)).fetchone()[0]


def test_an_idle_agent_flushes_when_something_is_due_not_every_tick(tmp_path):
    """flush_interval 10 ms (the tests' agents): a polling loop flushed ~100 times a second; this one flushes for its
    liveness unit and its hardware samples (about 2 a second), and each sample's fleet windows still reach the
    root every second."""
    write_host(tmp_path / "sys", nics=2, hcas=2)
    root = make_root(tmp_path / "root.db")
    agent = make_agent([root.address], tmp_path / "a.sock", "agent-idle", nic_probe=True,
                       sysfs_root=tmp_path / "sys", host_id="idle-0", host_index=0)
    try:
        wait_for(lambda: _fleet_seconds(root) >= 1, WAIT, what="the first fleet second at the root")
        flushes, seconds, started = agent.flusher.flushes, _fleet_seconds(root), time.monotonic()
        time.sleep(3.0)
        took = time.monotonic() - started
        flushed = agent.flusher.flushes - flushes
        assert flushed <= 5 * took, f"{flushed} flushes in {took:.1f} s"
        wait_for(lambda: _fleet_seconds(root) >= seconds + 2, WAIT, what="fleet seconds still flowing")
    finally:
        stop_all(agent, root)


def test_a_ranks_steps_still_leave_at_once_and_an_unclosed_step_at_its_deadline(tmp_path):
    """Two ranks: a step both close goes up when the second closes it (the message wakes the loop); a step one rank
    never closes, with nothing arriving after, is sealed at its deadline (the loop sleeps until then, not forever)."""
    root = make_root(tmp_path / "root.db")
    agent = make_agent([root.address], tmp_path / "a.sock", "agent-ranks", deadline_floor_s=1.0,
                       gpu_probe=False, nic_probe=False)
    runs = [telemetry.init(job="wk", rank=r, world_size=2, agent=f"unix:{agent.socket_path}") for r in range(2)]
    try:
        for run in runs:
            run.log(0, loss=1.0)
            run.end_step(0)
        wait_for(lambda: steps(root.api_address, "wk", "loss"), WAIT, what="the closed step at the root")
        runs[0].log(1, loss=2.0)
        runs[0].end_step(1)
        runs[1].log(1, loss=3.0)  # rank 1 never closes step 1 and sends nothing more
        sealed = wait_for(lambda: [s for s in steps(root.api_address, "wk", "loss") if s["step"] == 1], WAIT,
                          what="the unclosed step sealed at its deadline")
        assert sealed[0]["count"] == 2
    finally:
        for run in runs:
            run.close(2.0)
        stop_all(agent, root)


def test_the_tiers_flush_when_a_unit_comes_or_something_is_due(tmp_path):
    """A rack and the root under one idle agent (one unit a second each way up): each tier flushes a few times a
    second, not every 10 ms, and the fleet's seconds still go through both."""
    write_host(tmp_path / "sys", nics=2, hcas=2)
    root = make_root(tmp_path / "root.db")
    rack = make_collector([root.address], "rack0")
    agent = make_agent([rack.address], tmp_path / "a.sock", "agent-idle", nic_probe=True,
                       sysfs_root=tmp_path / "sys", host_id="idle-0", host_index=0)
    try:
        wait_for(lambda: _fleet_seconds(root) >= 1, WAIT, what="the first fleet second at the root")
        before, seconds, started = (rack.flusher.flushes, root.flusher.flushes), _fleet_seconds(root), time.monotonic()
        time.sleep(3.0)
        took = time.monotonic() - started
        for name, tier, flushes in (("rack", rack, before[0]), ("root", root, before[1])):
            flushed = tier.flusher.flushes - flushes
            assert flushed <= 10 * took, f"the {name} flushed {flushed} times in {took:.1f} s"
        wait_for(lambda: _fleet_seconds(root) >= seconds + 2, WAIT, what="fleet seconds still flowing")
    finally:
        stop_all(agent, rack, root)


def test_a_tier_above_racks_wakes_at_the_fleet_cut_off_it_passes_seconds_on_at(monkeypatch):
    """A root above two racks holds a fleet second with one rack's part in: next_due is the cut-off _fleet_passed
    applies above racks (twice the grace after the hosts' sample, fleet.SAMPLE_PHASE into the second), not the rack's
    (one grace), which from 0.5 s to 1.0 s after it was already past and made the tier flush every interval until its own came."""
    from types import SimpleNamespace

    from pyroaring import BitMap

    from collectors.common.keys import Key
    from collectors.delivery import node as node_module
    from collectors.delivery.node import Node, RankView
    from collectors.delivery.windows import Deadlines, Part
    from helpers_tree import summary_of

    wall_s = 1_000_000.4  # 0.7 s after the hosts sampled the second 999,999 (at 0.7 s): past one grace, not two
    monkeypatch.setattr(node_module, "time", SimpleNamespace(time=lambda: wall_s, monotonic=time.monotonic))
    root = Node("root", Deadlines(floor_s=30.0), ack_down=lambda *a, **k: None, fleet_grace_s=0.5)
    ports = {h: fleet.source(h, 64) for h in range(3)}
    root.child_ranks["rack0"] = {fleet.FLEET_JOB: RankView(alive=BitMap([ports[0], ports[1]]))}
    root.child_ranks["rack1"] = {fleet.FLEET_JOB: RankView(alive=BitMap([ports[2]]))}
    key = Key(fleet.FLEET_JOB, "ib.port_active", 999_999_000, 1000)
    assert root.offer(Part(key, [("rack1", 1)], BitMap([ports[2]]), built=summary_of({ports[2]: 1.0})), 1)[0] \
        == "accepted"
    (win,) = root.table.pending_windows()
    now = time.monotonic()
    assert not root._fleet_passed(win)
    assert root.next_due(now) == pytest.approx(now + 0.3, abs=1e-6)  # the sample + 2 x 0.5 s, 0.3 s from now
    wall_s += 0.3
    assert root._fleet_passed(win)
