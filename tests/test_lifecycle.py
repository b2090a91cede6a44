"""Jobs that end and children that leave (issue 11 item 3, DESIGN §8).

A job whose ranks all closed (`run.close()`), or that nothing arrived of for the idle timeout, leaves
the agent, every collector, the root's live state, its detectors and its /metrics series; its history
stays in the root's store and JSON API. A child gone longer than the timeout is forgotten by its old
parent. Real servers on loopback and Unix sockets, the real SDK; the timeout is short to keep it quick.
"""

from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

import telemetry
from collectors.delivery.lifecycle import ChildLifecycle, JobLifecycle
from helpers_tree import RawChild, api_get, make_agent, make_collector, make_root, steps, stop_all, wait_for, window
from telemetry.v1 import ingest_pb2, ingest_pb2_grpc

IDLE_S = 2.0


# ---------------------------------------------------------------- the rules, alone
def test_a_job_whose_ranks_all_closed_goes_after_the_grace() -> None:
    life = JobLifecycle(idle_timeout_s=100.0, grace_s=5.0)
    life.touch("a", 0.0)
    assert life.sweep(1.0, ["a"], lambda job: False) == []
    assert life.sweep(2.0, ["a"], lambda job: True) == []    # closed from now
    assert life.sweep(6.9, ["a"], lambda job: True) == []
    assert life.sweep(7.0, ["a"], lambda job: True) == [("a", "closed")]
    assert not life.live("a") and life.live_jobs() == []
    # Still reported by a child for a while: not brought back by that; new data does bring it back.
    assert life.sweep(8.0, ["a"], lambda job: True) == []
    life.touch("a", 9.0)
    assert life.live("a") and life.live_jobs() == ["a"]


def test_an_idle_job_goes_after_the_timeout_and_a_reopened_one_waits_again() -> None:
    life = JobLifecycle(idle_timeout_s=10.0, grace_s=1.0)
    life.touch("b", 0.0)
    assert life.sweep(5.0, ["b"], lambda job: True) == []      # closed at 5...
    assert life.sweep(5.5, ["b"], lambda job: False) == []     # ...then a rank came back: not closed
    assert life.sweep(9.9, ["b"], lambda job: False) == []
    assert life.sweep(10.0, ["b"], lambda job: False) == [("b", "idle")]
    # A job known only from rank states (no data yet) counts from when it was first seen.
    assert life.sweep(11.0, ["c"], lambda job: False) == []
    assert life.sweep(21.0, ["c"], lambda job: False) == [("c", "idle")]
    # Forgotten jobs are remembered only for the timeout.
    assert life.sweep(40.0, [], lambda job: False) == [] and life.live("b") and life.live("c")


def test_a_child_is_forgotten_only_after_its_last_stream_was_gone_for_the_timeout() -> None:
    children = ChildLifecycle(timeout_s=10.0)
    children.connected("x")
    children.connected("x")          # a reconnect that overlaps the old stream
    children.disconnected("x", 1.0)  # the old stream ends: still connected
    assert children.sweep(100.0) == []
    children.disconnected("x", 2.0)
    assert children.sweep(11.9) == []
    children.connected("x")          # back in time
    children.disconnected("x", 20.0)
    assert children.sweep(29.0) == [] and children.sweep(30.0) == ["x"] and children.sweep(99.0) == []


def test_bad_timeouts_are_refused() -> None:
    with pytest.raises(ValueError, match="job-idle-timeout"):
        JobLifecycle(idle_timeout_s=0)


# ---------------------------------------------------------------- a real tree
@pytest.fixture()
def tree(tmp_path: Path):
    root = make_root(tmp_path / "root.db", job_idle_timeout_s=IDLE_S)
    rack = make_collector([root.address], "rack", job_idle_timeout_s=IDLE_S)
    agent = make_agent([rack.address], tmp_path / "agent.sock", "agent", job_idle_timeout_s=IDLE_S)
    try:
        yield root, rack, agent, tmp_path / "agent.sock"
    finally:
        stop_all(agent, rack, root)


def _metrics(root) -> str:
    with urllib.request.urlopen(f"http://{root.api_address}/metrics", timeout=10) as reply:
        return reply.read().decode()


def _everywhere(root, rack, agent, job: str) -> dict[str, bool]:
    """Where the job still lives."""
    with agent.node.lock:
        in_agent = (job in agent.registry.jobs() or any(j == job for j, _ in agent.service.steps)
                    or job in agent.lifecycle.live_jobs() or job in agent.service.budget._names)
    with rack.node.lock:
        in_rack = job in rack.node.jobs() or job in rack.lifecycle.live_jobs() or job in rack.service.budget._names
    in_root = job in root.jobs() or job in root.wiring.detectors.jobs()
    in_metrics = f'job="{job}"' in _metrics(root)
    return {"agent": in_agent, "rack": in_rack, "root": in_root, "metrics": in_metrics}


def _run_job(sock: Path, job: str, ranks: int, steps_: int, close: bool = True) -> list:
    runs = [telemetry.init(job=job, rank=r, world_size=ranks, agent=f"unix:{sock}") for r in range(ranks)]
    for step in range(steps_):
        for r, run in enumerate(runs):
            with run.step(step):
                run.log(step, loss=float(10 * step + r))
    if close:
        assert all(run.close(timeout=60) for run in runs)
    return runs


def test_a_closed_job_leaves_every_tier_and_metrics_but_not_the_history(tree) -> None:
    root, rack, agent, sock = tree
    _run_job(sock, "done", ranks=3, steps_=4)
    rows = wait_for(lambda: len(steps(root.api_address, "done", "loss")) == 4 and steps(root.api_address, "done",
                                                                                        "loss"),
                    what="the job's 4 steps at the root")
    assert [row["count"] for row in rows] == [3, 3, 3, 3]
    assert _everywhere(root, rack, agent, "done")["metrics"]
    wait_for(lambda: not any(_everywhere(root, rack, agent, "done").values()), timeout=30,
             what="the closed job to leave agent, rack, root and /metrics")
    # History stays: the store and the JSON API still answer for the job.
    assert [row["count"] for row in steps(root.api_address, "done", "loss")] == [3, 3, 3, 3]
    status, body = api_get(root.api_address, "/api/v1/jobs")
    assert status == 200 and "done" in [j["job"] for j in body["jobs"]]


def test_many_jobs_in_a_row_leave_nothing_behind(tree) -> None:
    root, rack, agent, sock = tree
    jobs = [f"short-{i}" for i in range(12)]
    for job in jobs:
        _run_job(sock, job, ranks=2, steps_=2)
    wait_for(lambda: all(len(steps(root.api_address, job, "loss")) == 2 for job in jobs), timeout=30,
             what="every job's steps at the root")
    wait_for(lambda: not agent.registry.ranks and not rack.node.jobs() and not root.jobs(), timeout=30,
             what="every finished job forgotten")
    text = _metrics(root)
    assert not [job for job in jobs if f'job="{job}"' in text]
    with agent.node.lock:
        assert agent.service.steps == {} and agent.service.beats == {}
    for server in (agent, rack, root):  # their settled windows went with them, not retain_s later
        wait_for(lambda: not [k for k in list(server.node.table.windows) if k.job in jobs], timeout=15,
                 what=f"{server.node.node_id}'s windows of the finished jobs dropped")
    assert not [k for k in list(root.finaliser.final) if k.job in jobs]


def _per_job_maps(server) -> dict[str, set[str]]:
    """The jobs each per-job map of a tier holds (the soak's per-job memory growth lived in one of these)."""
    node = server.node
    with node.lock:
        maps = {"node.jobs": node.jobs(), "windows": {k.job for k in node.table.windows},
                "deadlines": set(node.table.deadlines._starts) | set(node.table.deadlines._medians),
                "durability": {origin[0].rpartition("/")[0] for origin in node.durability._refs},
                "lifecycle.live": set(server.lifecycle.live_jobs()),
                "budget": set(server.service.budget._names)}
        upstream = getattr(server, "upstream", None)
        if upstream is not None:
            maps["upstream.hosts_sent"] = set(upstream._hosts_sent)
        if hasattr(server, "registry"):  # the agent
            maps["registry"] = server.registry.jobs()
            maps["steps"] = {job for job, _ in server.service.steps}
            maps["open_per_job"] = set(server.service._open_per_job)
            maps["beats"] = {key.job for key in server.service.beats}
    return maps


def test_a_finished_job_leaves_no_per_job_state_in_any_tier(tree) -> None:
    """Many short jobs: once each is forgotten (grace over), no map of agent, rack or root still names it. The
    soak (docs/soak.md) saw the agent grow per job while every map the other tests look at was empty: the
    rank->host lists an Upstream had sent its parent were kept per job for the life of the connection."""
    root, rack, agent, sock = tree
    jobs = [f"gone-{i}" for i in range(6)]
    for job in jobs:
        _run_job(sock, job, ranks=2, steps_=2)
    wait_for(lambda: not agent.registry.ranks and not rack.node.jobs() and not root.jobs(), timeout=30,
             what="every finished job forgotten")

    def left() -> dict[str, list[str]]:
        found = {f"{name} {what}": sorted(held & set(jobs))
                 for name, server in (("agent", agent), ("rack", rack), ("root", root))
                 for what, held in _per_job_maps(server).items() if held & set(jobs)}
        if set(root.wiring.hosts) & set(jobs):
            found["root wiring.hosts"] = sorted(set(root.wiring.hosts) & set(jobs))
        return found

    # The next unit after the forgetting (within the liveness interval, 1 s) sends the rank states without the
    # jobs: what an Upstream keeps of the hosts it sent is brought up to date there.
    try:
        wait_for(lambda: not left(), timeout=5, what="no per-job state left")
    except AssertionError:
        assert left() == {}
        raise


def test_the_roots_periodic_check_does_not_bring_back_a_finished_jobs_hosts(tmp_path: Path) -> None:
    """The root's detector check reads its jobs, then their liveness and hosts, then stores the hosts: a job
    forgotten in between (the flush thread's sweep) was put back into the hosts map for good (the soak's root
    kept ~1 job in 15). Here the job is forgotten exactly there, from inside the liveness read."""
    root = make_root(tmp_path / "root.db", job_idle_timeout_s=IDLE_S)
    child = RawChild(root.address, "raw")
    try:
        child.batch(window("racy", "step_time", 0, {0: 1.0}, expected=1))
        wait_for(lambda: "racy" in root.wiring.hosts, what="the job in the root's hosts map")
        fired = []
        liveness = root.liveness

        def forgotten_meanwhile(job: str) -> dict[str, object]:
            if job == "racy" and not fired:
                fired.append(job)
                for callback in root.on_job_finished:  # what the sweep does when it forgets the job
                    callback(job)
            return liveness(job)

        root.liveness = forgotten_meanwhile
        wait_for(lambda: fired, what="the periodic check to read the job's liveness")
        time.sleep(1.0)  # two more checks (every 0.5 s)
        assert "racy" not in root.wiring.hosts
    finally:
        child.close()
        stop_all(root)


def test_a_job_that_went_silent_is_forgotten_after_the_idle_timeout(tree) -> None:
    """A rank that registered, sent one step and vanished without closing (a crash the agent may even
    see as a live process): nothing arrives any more, so the job goes after the idle timeout."""
    root, rack, agent, sock = tree
    channel = grpc.insecure_channel(f"unix:{sock}")
    stub = ingest_pb2_grpc.AgentStub(channel)
    messages = [ingest_pb2.RankMessage(hello=ingest_pb2.RankHello(job="silent", rank=0, world_size=2, pid=os.getpid())),
                ingest_pb2.RankMessage(batch=ingest_pb2.RankBatch(job="silent", rank=0, seq=1, steps=[
                    ingest_pb2.RankStepBatch(step=0, closed=True, metrics=[
                        ingest_pb2.MetricValues(metric="loss", values=[1.5])])]))]
    call = stub.Stream(iter(messages), timeout=30)
    assert next(call).status == ingest_pb2.RankAck.REGISTERED
    wait_for(lambda: steps(root.api_address, "silent", "loss"), what="the one step at the root")
    call.cancel()
    channel.close()
    wait_for(lambda: not any(_everywhere(root, rack, agent, "silent").values()), timeout=30,
             what="the silent job to be forgotten everywhere")
    assert steps(root.api_address, "silent", "loss")[0]["count"] == 1


def test_a_child_that_left_is_forgotten_by_its_old_parent(tree) -> None:
    """A child that failed over elsewhere (or was decommissioned) stops counting at its old parent."""
    root, rack, agent, _ = tree
    child = RawChild(rack.address, "failed-over")
    seq = child.batch(window("elsewhere", "loss", 0, {5: 1.0}, expected=8))
    child.ack(10)
    wait_for(lambda: "failed-over" in rack.node.child_ranks or "failed-over" in rack.node.child_counters,
             what="the child known to the rack")
    assert seq == 1
    child.close()
    time.sleep(IDLE_S / 2)
    assert "failed-over" in rack.node.child_counters  # not before the timeout
    wait_for(lambda: "failed-over" not in rack.node.child_counters and "failed-over" not in rack.node.child_ranks,
             timeout=15, what="the child forgotten by its old parent")
    assert "agent" in rack.node.child_counters  # the child still connected stays


def test_open_steps_are_bounded_and_nothing_is_lost(tree) -> None:
    """A rank that opens steps without end (here 1,500 at once, newest first, none closed): the agent keeps
    at most MAX_OPEN_STEPS_PER_JOB open, sealing the oldest early, and every value still reaches the root."""
    from collectors.agent.service import MAX_OPEN_STEPS_PER_JOB
    root, _, agent, sock = tree
    many = 1500
    channel = grpc.insecure_channel(f"unix:{sock}")
    stub = ingest_pb2_grpc.AgentStub(channel)
    batch = ingest_pb2.RankBatch(job="wide", rank=0, seq=1, steps=[
        ingest_pb2.RankStepBatch(step=step, metrics=[ingest_pb2.MetricValues(metric="loss", values=[float(step)])])
        for step in reversed(range(many))])
    held: list[int] = []
    requests = [ingest_pb2.RankMessage(hello=ingest_pb2.RankHello(job="wide", rank=0, world_size=2, pid=os.getpid())),
                ingest_pb2.RankMessage(batch=batch)]
    call = stub.Stream(iter(requests), timeout=60)
    for ack in call:
        if ack.status == ingest_pb2.RankAck.RECEIVED:
            with agent.node.lock:
                held.append(agent.service.open_steps("wide"))
            break
    assert held and held[0] <= MAX_OPEN_STEPS_PER_JOB
    rows = wait_for(lambda: len(steps(root.api_address, "wide", "loss", last=many)) == many
                    and steps(root.api_address, "wide", "loss", last=many), timeout=30, what="every step at the root")
    assert sorted(row["mean"] for row in rows) == [float(s) for s in range(many)]
    assert all(row["count"] == 1 for row in rows)
    call.cancel()
    channel.close()


def test_a_second_run_in_the_same_process_is_not_taken_for_resends(tree) -> None:
    """telemetry.init() again in one process (same job, rank and pid) numbers its batches from 1 again;
    the agent must see a new Run (RankHello.incarnation), not acknowledge its batches as resends unstored."""
    root, _, _, sock = tree
    _run_job(sock, "again", ranks=1, steps_=3)
    runs = [telemetry.init(job="again", rank=0, world_size=1, agent=f"unix:{sock}")]
    for step in range(3, 6):
        with runs[0].step(step):
            runs[0].log(step, loss=float(10 * step))
    assert runs[0].close(timeout=60)
    rows = wait_for(lambda: len(steps(root.api_address, "again", "loss")) == 6 and steps(root.api_address, "again",
                                                                                         "loss"),
                    what="the second run's steps at the root")
    assert [(r["step"], r["count"], r["max"]) for r in rows[3:]] == [(3, 1, 30.0), (4, 1, 40.0), (5, 1, 50.0)]


def test_a_closed_job_that_vanished_below_first_still_counts_as_closed() -> None:
    """The agent forgets a closed job before its parents do (its grace began first); the job then vanishes
    from the rank states the parents see, which must not send it to the 600 s idle path."""
    life = JobLifecycle(idle_timeout_s=600.0, grace_s=10.0)
    life.touch("j", 0.0)
    assert life.sweep(1.0, ["j"], lambda job: True) == []
    assert life.sweep(5.0, [], lambda job: False) == []      # gone from the children's states
    assert life.sweep(11.0, [], lambda job: False) == [("j", "closed")]
