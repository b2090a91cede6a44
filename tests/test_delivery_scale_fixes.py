"""What keeps a tier's cost per step flat as the job grows (issue 5): roaring bitmaps travel optimised,
completeness is computed once per flush per job, and rank->host lists go up only when they change (and in
full after each (re)connect) while every tier above still knows every rank's host.
"""

from __future__ import annotations

import time

import numpy as np
from pyroaring import BitMap

from collectors.common.keys import Key
from collectors.delivery.node import Node, RankView, Upstream
from collectors.delivery.windows import Deadlines, Part
from helpers_tree import FAST_COLLECTOR, RawChild, make_collector, make_root, stop_all, wait_for, window
from stub_outbox import StubOutbox
from telemetry.summary import Summary
from telemetry.v1 import forward_pb2


# ------------------------------------------------------------------ bitmaps
def test_merged_contiguous_sources_serialise_as_runs_and_round_trip():
    parts = [Summary.from_arrays(np.arange(8, dtype=np.float64) + r, np.arange(r, r + 8)) for r in range(0, 4096, 8)]
    merged = Summary.merge_all(parts)
    msg = merged.to_proto()
    assert len(msg.sources) < 64, "4,096 contiguous sources are one run, not 2 bytes each"
    back = Summary.from_proto(msg)
    assert back == merged
    assert back.sources == BitMap(range(4096))
    assert back.count == 4096 and back.argmax == 4095 and back.argmin == 0


def test_nonfinite_sources_are_optimised_too_and_stay_exact():
    values = np.full(2048, 1.0)
    values[100:1100] = np.nan
    summary = Summary.merge_all([Summary.from_arrays(values[r:r + 8], np.arange(r, r + 8)) for r in range(0, 2048, 8)])
    msg = summary.to_proto()
    assert len(msg.nonfinite_sources) < 64
    back = Summary.from_proto(msg)
    assert back.nonfinite_sources == BitMap(range(100, 1100)) and back.nonfinite_count == 1000


def test_rank_states_serialise_as_runs():
    view = RankView(world_size=16384)
    for rank in range(16384):
        view.alive.add(rank)
    msg = view.to_proto("job")
    assert len(msg.alive) < 64
    assert RankView.from_proto(msg).alive == BitMap(range(16384))


# ------------------------------------------------------------------ covered, once per flush
class _Sink:
    def __init__(self) -> None:
        self.shipped: list = []

    def ship(self, node, windows, now):
        self.shipped.extend(windows)

    def forget(self, keys):
        pass


def _node() -> Node:
    node = Node("rack0", Deadlines(floor_s=60.0), lambda origin, index=None, overlap=None: None)
    node.sink = _Sink()
    return node


def test_covered_is_computed_once_per_flush_per_job_and_seals_exactly_when_complete():
    node = _node()
    node.child_ranks = {f"agent{a}": {"job": RankView(alive=BitMap(range(a * 8, a * 8 + 8)), world_size=32)}
                        for a in range(4)}
    calls = []
    views = node._views
    node._views = lambda job: calls.append(job) or views(job)
    for metric in range(20):
        for a in range(3):  # agent3 has not reported
            summary = Summary.from_arrays(np.ones(8), np.arange(a * 8, a * 8 + 8))
            node.offer(Part(Key("job", f"m{metric}", 1), [(f"agent{a}", 1)], summary._sources, built=summary), 32)
    node.flush()
    assert calls == ["job"], "one union per job per flush, not one per pending window"
    assert node.sink.shipped == []
    for metric in range(20):
        summary = Summary.from_arrays(np.ones(8), np.arange(24, 32))
        node.offer(Part(Key("job", f"m{metric}", 1), [("agent3", 1)], summary._sources, built=summary), 32)
    calls.clear()
    node.flush()
    assert calls == [], "the ranks' states did not change: the union is kept across flushes"
    assert len(node.sink.shipped) == 20


def _offer_all(node: Node, metric: str, ranks: range, seq: int) -> None:
    for first in range(ranks.start, ranks.stop, 8):
        summary = Summary.from_arrays(np.ones(8), np.arange(first, first + 8))
        node.offer(Part(Key("job", metric, 1), [(f"agent{first // 8}", seq)], summary._sources, built=summary), 32)


def test_the_covered_ranks_kept_across_flushes_follow_every_change_of_the_childrens_states():
    """A collector flushes after each child's unit; what it covers is kept between flushes only while no child's
    states change: a child's ranks growing, a rank turning stuck or dead, a run closing, a child added, forgotten or
    its job finished each change which windows are complete."""
    node = _node()
    alive = {a: RankView(alive=BitMap(range(a * 8, a * 8 + 8)), world_size=32) for a in range(4)}
    for a in range(3):
        node.child_states(f"agent{a}", {"job": alive[a]})
    _offer_all(node, "m0", range(0, 24), 1)
    node.flush()
    assert [w.key.metric for w in node.sink.shipped] == ["m0"], "agents 0-2 are every rank known"
    node.child_states("agent3", {"job": alive[3]})  # a child comes: its ranks count from now on
    _offer_all(node, "m1", range(0, 24), 2)
    node.flush()
    assert [w.key.metric for w in node.sink.shipped] == ["m0"], "agent3's ranks have not reported m1"
    node.child_states("agent3", {"job": RankView(dead=BitMap(range(24, 32)), world_size=32)})  # same ranks, dead
    node.flush()
    assert [w.key.metric for w in node.sink.shipped] == ["m0"], "dead ranks are still waited for (until the deadline)"
    node.child_states("agent3", {"job": RankView(closed=BitMap(range(24, 32)), world_size=32)})  # its run closed
    node.flush()
    assert [w.key.metric for w in node.sink.shipped] == ["m0", "m1"], "agent3's ranks closed: m1 is complete"
    node.child_states("agent3", {"job": alive[3]})  # back (a restart)
    _offer_all(node, "m2", range(0, 24), 3)
    node.flush()
    assert len(node.sink.shipped) == 2
    node.forget_child("agent3")
    node.flush()
    assert [w.key.metric for w in node.sink.shipped] == ["m0", "m1", "m2"], "agent3 forgotten: m2 is complete"
    node.child_ranks["agent9"] = {"job": RankView(alive=BitMap([40]), world_size=48)}  # as tests assign them
    _offer_all(node, "m3", range(0, 24), 4)
    node.flush()
    assert len(node.sink.shipped) == 3, "a child added by assignment counts too"


# ------------------------------------------------------------------ hosts: deltas up, union kept below
def _sent_hosts(upstream: Upstream) -> dict[int, str]:
    states = upstream.outbox.units[-1].message.ranks[0]
    return dict(zip(states.host_ranks, states.hosts))


def test_upstream_sends_hosts_once_then_only_changes_then_all_after_a_reconnect():
    node = _node()
    upstream = Upstream(node, lambda on_ack: StubOutbox(), liveness_every_s=0.0)
    node.sink = upstream
    view = RankView(alive=BitMap(range(8)), world_size=8, hosts={r: "h0" for r in range(8)})
    node.own_ranks = {"job": view}
    node.flush(1.0)
    assert _sent_hosts(upstream) == {r: "h0" for r in range(8)}
    node.flush(2.0)
    assert _sent_hosts(upstream) == {}, "unchanged hosts are not resent"
    assert upstream.outbox.units[-1].message.ranks[0].alive, "the liveness bitmaps still go in every unit"
    moved = RankView(alive=BitMap(range(8)), world_size=8, hosts={**view.hosts, 3: "h1"})
    node.own_ranks = {"job": moved}
    node.flush(3.0)
    assert _sent_hosts(upstream) == {3: "h1"}
    node.own_ranks = {"job": RankView(alive=BitMap(range(8)), world_size=8, hosts=dict(moved.hosts))}
    node.flush(4.0)
    assert _sent_hosts(upstream) == {}, "new view objects with the same hosts change nothing"
    upstream.outbox.connections += 1  # the stream broke and came back, perhaps to another parent
    node.flush(5.0)
    assert _sent_hosts(upstream) == moved.hosts


def test_receiver_keeps_each_childs_hosts_across_units_and_prunes_ranks_it_no_longer_covers():
    node = _node()

    def states(ranks, hosts):
        return {"job": RankView.from_proto(RankView(alive=BitMap(ranks), world_size=16, hosts=hosts).to_proto("job"))}

    node.child_states("a0", states(range(8), {r: "h0" for r in range(8)}))
    node.child_states("a1", states(range(8, 16), {r: "h1" for r in range(8, 16)}))
    version = node.hosts_version
    node.child_states("a0", states(range(8), {}))
    assert node.hosts_version == version
    hosts = node.ranks("job").hosts
    assert hosts == {**{r: "h0" for r in range(8)}, **{r: "h1" for r in range(8, 16)}}
    node.child_states("a0", states(range(8), {2: "h9"}))
    assert node.ranks("job").hosts[2] == "h9" and node.hosts_version > version
    node.child_states("a1", states(range(8, 12), {}))  # ranks 12..15 left a1
    assert set(node.ranks("job").hosts) == set(range(12))
    assert node.states("job").alive == BitMap(range(12)) and node.states("job").world_size == 16


def test_hosts_reach_the_root_through_a_rack_and_again_after_the_root_restarts(tmp_path):
    root = make_root(tmp_path / "root.db")
    rack = make_collector([root.address], "rack0")
    children = []
    try:
        for a in range(2):
            child = RawChild(rack.address, f"agent{a}")
            children.append(child)
            ranks = range(a * 8, a * 8 + 8)
            child.send(forward_pb2.SummaryBatch(
                sender_id=child.sender_id, seq=1,
                windows=[window("hj", "loss", 1, {r: 1.0 for r in ranks}, expected=16)],
                ranks=[RankView(alive=BitMap(ranks), world_size=16,
                                hosts={r: f"host{a}" for r in ranks}).to_proto("hj")]))
        expected = {r: f"host{r // 8}" for r in range(16)}

        def root_hosts(server):
            with server.node.lock:
                return server.node.ranks("hj").hosts

        wait_for(lambda: root_hosts(root) == expected, 10, what="every rank's host at the root")
        # Later units from the rack carry no host lists; the root keeps them.
        time.sleep(3 * FAST_COLLECTOR["flush_interval_s"] + 1.2)
        assert root_hosts(root) == expected
        address = root.address
        root.stop(0)
        root = make_root(tmp_path / "root.db", listen=address)
        wait_for(lambda: root_hosts(root) == expected, 15, what="hosts sent in full after the rack reconnected")
    finally:
        for child in children:
            child.close()
        stop_all(rack, root)


def test_tune_gc_raises_thresholds_and_never_lowers_them():
    import gc

    from collectors.common.gctune import THRESHOLDS, tune_gc

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 50)
        tune_gc()
        assert gc.get_threshold() == (THRESHOLDS[0], THRESHOLDS[1], max(50, THRESHOLDS[2]))
        gc.set_threshold(100_000, 10, 10)
        tune_gc()
        assert gc.get_threshold()[0] == 100_000
    finally:
        gc.set_threshold(*before)
