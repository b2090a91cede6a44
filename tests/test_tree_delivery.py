"""Delivery (DESIGN §5, issue 3): resend after a restart, duplicates absorbed, partial overlaps refused
naming the overlap, persisted windows reloaded by a restarted root, fallback parents, bounded outboxes.

Real gRPC servers in this process on loopback (port 0) and Unix sockets under tmp_path.
"""

from __future__ import annotations

import threading
import time

import pytest

import telemetry
from collectors.agent.server import AgentConfig, AgentServer
from collectors.delivery.outbox import Outbox
from helpers_tree import (
    FAST_AGENT,
    FakeParent,
    RawChild,
    counters,
    dead_address,
    make_agent,
    make_collector,
    make_root,
    steps,
    stop_all,
    wait_for,
    window,
)
from telemetry.v1 import forward_pb2

DURABLE = forward_pb2.Ack.DURABLE
RECEIVED = forward_pb2.Ack.RECEIVED
REJECTED = forward_pb2.Ack.REJECTED_OVERLAP


def _value(step: int, rank: int) -> float:
    return step * 10.0 + rank * 0.25


def _check_exact(api: str, job: str, world: int, last_step: int) -> list[dict]:
    rows = steps(api, job, "loss")
    assert [r["step"] for r in rows] == list(range(1, last_step + 1)), "every step once, in order"
    for row in rows:
        values = [_value(row["step"], r) for r in range(world)]
        assert row["count"] == world, row
        assert row["missing"] == [], row
        assert row["min"] == min(values) and row["argmin"] == 0, row
        assert row["max"] == max(values) and row["argmax"] == world - 1, row
        assert row["mean"] * row["count"] == pytest.approx(sum(values), rel=1e-12)
        assert row["top"] == [[v, r] for r, v in sorted(enumerate(values), key=lambda p: -p[1])][:8]
    return rows


class _Trainer:
    """`world` ranks in this process logging `loss` every `interval` s on a thread, until `last_step`."""

    def __init__(self, job: str, world: int, agent: AgentServer, last_step: int, interval: float = 0.05) -> None:
        self.runs = [telemetry.init(job=job, rank=r, world_size=world, agent=f"unix:{agent.socket_path}")
                     for r in range(world)]
        self.last_step, self.interval = last_step, interval
        self.step = 0
        self.thread = threading.Thread(target=self._train, daemon=True)

    def _train(self) -> None:
        for step in range(1, self.last_step + 1):
            for rank, run in enumerate(self.runs):
                run.log(step, loss=_value(step, rank))
                run.end_step(step)
            self.step = step
            time.sleep(self.interval)

    def start(self) -> _Trainer:
        self.thread.start()
        return self

    def finish(self, timeout: float = 20.0) -> list[bool]:
        self.thread.join(timeout)
        return [run.close(timeout) for run in self.runs]


def _drop_durable_acks(server) -> None:
    """Simulate lost DURABLE acks from `server` to its children (rejections still go down)."""
    real = server.service.ack_down

    def lossy(origin, index=None, overlap=None):
        if index is not None:
            real(origin, index, overlap)

    server.service.ack_down = lossy


def _acks_lost_at(server, agent: AgentServer, api: str, job: str, last_step: int) -> tuple[_Trainer, list[dict]]:
    """`server` loses its DURABLE acks while 4 ranks of `job` log `last_step` steps, all finalised at the root:
    the trainer (its runs still open, their units unacknowledged) and the root's exact rows."""
    _drop_durable_acks(server)
    trainer = _Trainer(job, 4, agent, last_step=last_step, interval=0.02).start()
    trainer.thread.join(10)
    wait_for(lambda: len(steps(api, job, "loss")) == last_step, 10, what=f"{job}: all steps finalised")
    return trainer, _check_exact(api, job, 4, last_step)


# ---------------------------------------------------------------- restarts while ranks keep logging
def test_rack_restart_while_ranks_log_resends_and_totals_stay_exact(tmp_path):
    root = make_root(tmp_path / "root.db")
    rack = make_collector([root.address], "rack0")
    agent = make_agent([rack.address], tmp_path / "a.sock", "agent0")
    try:
        trainer = _Trainer("restart", 4, agent, last_step=40).start()
        wait_for(lambda: trainer.step >= 8, 10, what="ranks logging")
        address = rack.address
        rack.stop(0)
        # Steps keep sealing at the agent while its parent is down: they wait in its outbox.
        wait_for(lambda: agent.upstream.outbox.pending() >= 2, 10, what="units retained while the rack is down")
        time.sleep(0.3)
        rack = make_collector([root.address], "rack0", listen=address)
        assert all(trainer.finish()), "every rank's data became durable at the root"
        _check_exact(root.api_address, "restart", 4, 40)
        assert agent.upstream.outbox.resent > 0
        wait_for(lambda: counters(root)["resent"] > 0, 5, what="the resend counter reaching the root")
        assert counters(root)["rejected_overlaps"] == 0
    finally:
        stop_all(agent, rack, root)


def test_lost_acks_then_rack_restart_resend_is_absorbed_as_duplicates(tmp_path):
    root = make_root(tmp_path / "root.db")
    rack = make_collector([root.address], "rack0")
    agent = make_agent([rack.address], tmp_path / "a.sock", "agent0")
    try:
        trainer, before = _acks_lost_at(rack, agent, root.api_address, "dups", 10)
        assert agent.upstream.outbox.pending() > 0, "the agent still holds what was never acked durable"
        assert counters(root)["duplicates"] == 0
        address = rack.address
        rack.stop(0)
        rack = make_collector([root.address], "rack0", listen=address)
        assert all(trainer.finish()), "the resent units became durable"
        wait_for(lambda: agent.upstream.outbox.pending() == 0, 10, what="the agent's outbox to drain")
        assert agent.upstream.outbox.resent > 0
        assert counters(root)["duplicates"] > 0, "the resend reached the root and was absorbed"
        after = _check_exact(root.api_address, "dups", 4, 10)
        assert [(r["count"], r["late"], r["top"]) for r in after] == [(r["count"], r["late"], r["top"]) for r in before]
    finally:
        stop_all(agent, rack, root)


def test_lost_acks_then_root_restart_reloads_and_absorbs_resend(tmp_path):
    db = tmp_path / "root.db"
    root = make_root(db)
    rack = make_collector([root.address], "rack0")
    agent = make_agent([rack.address], tmp_path / "a.sock", "agent0")
    try:
        trainer, before = _acks_lost_at(root, agent, root.api_address, "rootdup", 8)
        assert rack.upstream.outbox.pending() > 0
        address = root.address
        root.stop(0)
        root = make_root(db, listen=address)
        assert all(trainer.finish()), "the rack's resend was acknowledged durable by the restarted root"
        assert counters(root)["duplicates"] > 0, "the restarted root recognised its persisted windows"
        assert rack.upstream.outbox.resent > 0
        after = _check_exact(root.api_address, "rootdup", 4, 8)
        assert [(r["count"], r["late"]) for r in after] == [(r["count"], r["late"]) for r in before]
    finally:
        stop_all(agent, rack, root)


# ---------------------------------------------------------------- overlap rules, driven by hand
@pytest.mark.parametrize("tier", ["root", "rack"])
def test_partial_overlap_is_rejected_naming_the_overlap(tmp_path, tier):
    root = make_root(tmp_path / "root.db")
    rack = make_collector([root.address], "rack0") if tier == "rack" else None
    target = rack or root
    child = RawChild(target.address, "hand")
    try:
        assert child.ack().seq == 0
        seq = child.batch(window("ov", "loss", 1, {0: 1.0, 1: 2.0}, expected=4))
        child.ack_for(seq, DURABLE)
        # {1, 2} overlaps {0, 1} partly: refused, naming source 1.
        seq = child.batch(window("ov", "loss", 1, {1: 5.0, 2: 3.0}, expected=4))
        ack = child.ack_for(seq, REJECTED)
        assert [(r.index, list(r.overlapping_sources)) for r in ack.rejections] == [(0, [1])]
        assert ack.rejections[0].reason and ack.rejections[0].key.step == 1
        # A batch mixing a new window and a partial overlap: only the overlap is refused.
        seq = child.batch(window("ov", "loss", 2, {0: 7.0, 1: 8.0}, expected=4),
                          window("ov", "loss", 1, {0: 1.0, 1: 2.0, 3: 4.0}, expected=4))
        ack = child.ack_for(seq, REJECTED)
        assert [(r.index, sorted(r.overlapping_sources)) for r in ack.rejections] == [(1, [0, 1])]
        # An exact duplicate is absorbed, not refused, and acknowledged durable.
        seq = child.batch(window("ov", "loss", 1, {0: 1.0, 1: 2.0}, expected=4))
        ack = child.ack()
        assert ack.seq == seq and ack.status == RECEIVED and not ack.rejections
        child.ack_for(seq, DURABLE)
        assert counters(target)["duplicates"] == 1
        assert counters(target)["rejected_overlaps"] == 2
        rows = wait_for(lambda: len(steps(root.api_address, "ov", "loss")) == 2
                        and steps(root.api_address, "ov", "loss"), 10, what="both steps finalised")
        assert [(r["step"], r["count"], r["missing"], r["min"], r["max"]) for r in rows] == [
            (1, 2, [2, 3], 1.0, 2.0), (2, 2, [2, 3], 7.0, 8.0)]
    finally:
        child.close()
        stop_all(rack, root)


def test_merged_part_overlapping_upstream_is_split_and_only_the_new_sources_land(tmp_path):
    """A rack's merged part that overlaps partly at the root is split into its constituents and resent:
    the duplicate constituent is absorbed, the new one is merged, nothing is counted twice."""
    root = make_root(tmp_path / "root.db")
    first = make_collector([root.address], "rack-a")
    second = make_collector([root.address], "rack-b")
    a, b = RawChild(first.address, "child-a"), RawChild(second.address, "child-b")
    try:
        a.ack()
        b.ack()
        seq = a.batch(window("split", "loss", 1, {0: 1.0}, expected=4))
        a.ack_for(seq, DURABLE)  # the root holds source 0
        # rack-b gets source 0 again (a resend via another path) and source 1, merged into one part.
        seq = b.batch(window("split", "loss", 1, {0: 1.0}, expected=4),
                      window("split", "loss", 1, {1: 2.0}, expected=4))
        b.ack_for(seq, DURABLE)
        assert counters(root)["rejected_overlaps"] >= 1, "the merged part was refused first"
        assert counters(root)["duplicates"] >= 1, "its source-0 constituent was then absorbed"
        row = steps(root.api_address, "split", "loss")[0]
        assert (row["count"], row["missing"], row["min"], row["max"], row["argmax"]) == (2, [2, 3], 1.0, 2.0, 1)
    finally:
        a.close()
        b.close()
        stop_all(first, second, root)


def test_restarted_root_reloads_persisted_windows_and_resend_is_duplicate(tmp_path):
    db = tmp_path / "root.db"
    root = make_root(db)
    child = RawChild(root.address, "hand")
    try:
        child.ack()
        seq = child.batch(window("re", "loss", 1, {0: 1.5, 1: 2.5}, expected=4))
        child.ack_for(seq, DURABLE)  # finalised at its deadline (2 of 4) and persisted
        child.close()
        root.stop(0)
        root = make_root(db)  # a new address; the windows come from the file
        rows = steps(root.api_address, "re", "loss")
        assert [(r["step"], r["count"], r["missing"], r["late"]) for r in rows] == [(1, 2, [2, 3], 0)]
        child = RawChild(root.address, "hand")
        child.ack()
        seq = child.batch(window("re", "loss", 1, {0: 1.5, 1: 2.5}, expected=4), seq=1)
        child.ack_for(seq, DURABLE)
        assert counters(root)["duplicates"] == 1
        assert [(r["count"], r["late"]) for r in steps(root.api_address, "re", "loss")] == [(2, 0)]
        # The reloaded window still knows its sources: a partial overlap is refused...
        seq = child.batch(window("re", "loss", 1, {1: 9.0, 2: 3.0}, expected=4))
        ack = child.ack_for(seq, REJECTED)
        assert list(ack.rejections[0].overlapping_sources) == [1]
        # ... and new sources arrive as a late delta, merged into the persisted row.
        seq = child.batch(window("re", "loss", 1, {2: 0.5}, expected=4, late=True))
        child.ack_for(seq, DURABLE)
        row = steps(root.api_address, "re", "loss")[0]
        assert (row["count"], row["missing"], row["late"], row["min"], row["argmin"], row["max"]) == (
            3, [3], 1, 0.5, 2, 2.5)
    finally:
        child.close()
        stop_all(root)


# ---------------------------------------------------------------- fallback parent, bounded outbox
def test_agent_falls_back_when_its_parent_is_dead(tmp_path):
    root = make_root(tmp_path / "root.db")
    rack = make_collector([root.address], "rack0")
    agent = make_agent([dead_address(), rack.address], tmp_path / "a.sock", "agent0")
    try:
        runs = [telemetry.init(job="fb", rank=r, world_size=4, agent=f"unix:{agent.socket_path}") for r in range(4)]
        for step in range(1, 6):
            for rank, run in enumerate(runs):
                run.log(step, loss=_value(step, rank))
                run.end_step(step)
        assert all(run.close(20) for run in runs)
        assert agent.upstream.outbox.connected_to == rack.address
        _check_exact(root.api_address, "fb", 4, 5)
    finally:
        stop_all(agent, rack, root)


def test_outbox_is_bounded_drops_oldest_and_counts():
    parent = FakeParent(durable=True)
    acked: list[tuple[int, int]] = []
    dropped: list[int] = []
    outbox: Outbox | None = None

    def on_ack(unit, ack):
        acked.append((unit.seq, ack.status))
        if ack.status == DURABLE:
            outbox.forget(unit.seq)

    one = forward_pb2.SummaryBatch(windows=[window("ob", "loss", 1, {0: 1.0})]).ByteSize()
    outbox = Outbox("bounded", [parent.address], None, on_ack, max_bytes=3 * one + one // 2,
                    on_drop=lambda u: dropped.append(u.seq))  # room for three units
    try:
        for step in range(1, 6):
            outbox.submit(forward_pb2.SummaryBatch(windows=[window("ob", "loss", step, {0: 1.0})]), payload=[])
        assert outbox.pending() == 3
        assert outbox.dropped_units == 2 and outbox.dropped_bytes == 2 * one
        assert dropped == [1, 2], "the oldest units go first"
        outbox.start()
        wait_for(lambda: outbox.pending() == 0, 10, what="the kept units to be acknowledged")
        assert parent.seqs() == [0, 3, 4, 5], "only what was kept is sent, in order"
        assert {seq for seq, status in acked if status == DURABLE} == {3, 4, 5}
    finally:
        outbox.close()
        parent.stop()


def test_outbox_drop_is_exported_in_the_counters_sent_up(tmp_path):
    """DESIGN §5: a bounded buffer that drops must count the drop AND export it up the tree."""
    parent = FakeParent(durable=False)  # receives, never makes anything durable: the outbox fills
    agent = AgentServer(AgentConfig(parents=[parent.address], socket=tmp_path / "a.sock", node_id="agent0",
                                    **FAST_AGENT))
    agent.upstream.outbox.max_bytes = 1024  # a unit or two
    agent.start()
    runs = []
    try:
        runs = [telemetry.init(job="ex", rank=r, world_size=2, agent=f"unix:{agent.socket_path}") for r in range(2)]
        for step in range(1, 7):
            for run in runs:
                run.log(step, loss=float(step))
                run.end_step(step)
            time.sleep(0.05)
        wait_for(lambda: agent.upstream.outbox.dropped_units > 0, 10, what="the outbox to overflow")

        def exported() -> bool:
            with parent.lock:
                return any(b.counters.dropped_windows > 0 for b in parent.batches)
        wait_for(exported, 4, what="a batch whose counters report the dropped windows")
        # ... and the ranks whose batches went with the dropped units are told so (close() is not True).
        wait_for(lambda: any(run.stats["refused_batches"] for run in runs), 5, what="the drop told to the ranks")
    finally:
        for run in runs:
            run.close(0.1)
        stop_all(agent)
        parent.stop()
