"""Work that need not be under the node's lock is not (issue 27): the agent reads /proc for its ranks' liveness
before taking the lock, and a job's rank->host map is built once per change of the hosts, not on every check."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any, cast

from pyroaring import BitMap

from collectors.agent import ranks as ranks_module
from collectors.delivery.node import Node, RankView
from collectors.delivery.windows import Deadlines
from helpers_tree import make_agent, make_root, stop_all


def _hello(rank: int, pid: int, job: str = "j", world: int = 4) -> SimpleNamespace:
    return SimpleNamespace(job=job, rank=rank, world_size=world, local_rank=rank, host="h", pid=pid, device="",
                           incarnation=1, attempt=0)


def test_the_agent_reads_proc_for_liveness_without_its_nodes_lock(tmp_path, monkeypatch):
    root = make_root(tmp_path / "root.db")
    agent = make_agent([root.address], tmp_path / "agent.sock", "agent0")
    try:
        with agent.node.lock:
            for rank in range(4):
                agent.registry.register(_hello(rank, os.getpid()), cast(Any, None))
        held: list[bool] = []
        status = ranks_module._status

        def watched(pid: int, reap: bool) -> Any:
            held.append(cast(Any, agent.node.lock)._is_owned())
            return status(pid, reap)
        monkeypatch.setattr(ranks_module, "_status", watched)
        with agent.node.lock:
            agent.registry.changed = True  # liveness is due at the next flush (this one, or the flush loop's)
        agent._flush()
        assert held, "the flush read no process status"
        assert not any(held), f"{held.count(True)} of {len(held)} /proc reads under the node's lock"
        with agent.node.lock:
            assert sorted(agent.node.own_ranks["j"].alive) == [0, 1, 2, 3]
    finally:
        stop_all(agent, root)


def test_a_jobs_host_map_is_built_once_per_change_of_the_hosts():
    node = Node("root", Deadlines(), ack_down=lambda *a, **k: None)
    node.child_states("rack0", {"j": RankView(alive=BitMap([0, 1]), world_size=4, hosts={0: "a", 1: "b"})})
    first = node.hosts("j")
    assert first == {0: "a", 1: "b"}
    assert node.hosts("j") is first, "nothing changed: the map is not rebuilt"
    node.child_states("rack1", {"j": RankView(alive=BitMap([2, 3]), world_size=4, hosts={2: "c", 3: "d"})})
    second = node.hosts("j")
    assert second == {0: "a", 1: "b", 2: "c", 3: "d"} and first == {0: "a", 1: "b"}, "a snapshot never changes"
    node.child_states("rack1", {"j": RankView(alive=BitMap([2, 3]), world_size=4, hosts={3: "e"})})
    assert node.hosts("j") == {0: "a", 1: "b", 2: "c", 3: "e"}
    node.forget_child("rack0")
    assert node.hosts("j") == {2: "c", 3: "e"}
    node.own_ranks = {"k": RankView(alive=BitMap([0]), world_size=1, hosts={0: "me"})}
    assert node.hosts("k") == {0: "me"} and node.hosts("j") == {2: "c", 3: "e"}
    node.forget_jobs({"j"})
    assert node.hosts("j") == {}


def test_the_root_judges_fingerprints_and_exits_without_its_nodes_lock(tmp_path, monkeypatch):
    """A verdict on fingerprints or exits may open an event, a SQLite write: the intake hands them over under the
    node's lock (CollectorService.on_fingerprints / on_exits), and they are judged on the judging thread, in order,
    without it (they were judged right there, under the lock)."""
    from pyroaring import BitMap as Bits

    from helpers_tree import wait_for
    from telemetry.v1 import forensics_pb2

    root = make_root(tmp_path / "root.db")
    try:
        judged: list[tuple[str, str, bool]] = []
        detectors = root.wiring.detectors

        def watch(kind: str, real: Any) -> Any:
            def call(job: str, found: Any) -> None:
                judged.append((kind, job, cast(Any, root.node.lock)._is_owned()))
                real(job, found)
            return call
        monkeypatch.setattr(detectors, "on_fingerprints", watch("fingerprints", detectors.on_fingerprints))
        monkeypatch.setattr(detectors, "on_exits", watch("exits", detectors.on_exits))
        what = "all_reduce in=Float[4] out=Float[4] pg=default_pg"
        prints = forensics_pb2.JobFingerprints(job="j", seqs=[forensics_pb2.MergedFingerprint(
            seq=1, min_hash=1, min_what=what, min_ranks=Bits([0]).serialize(), max_hash=2, max_what=what,
            max_ranks=Bits([1]).serialize())])
        with root.node.lock:  # as the service hands them over
            root.wiring.on_fingerprints([prints])
            root.wiring.on_exits([forensics_pb2.RankExit(job="j", rank=0, cause="exit_code", why="exit code 1")])
        wait_for(lambda: len(judged) == 2, 10, what="both judged")
        assert [(kind, job) for kind, job, _ in judged] == [("fingerprints", "j"), ("exits", "j")], "in order"
        assert not any(held for _, _, held in judged), judged
    finally:
        stop_all(root)
