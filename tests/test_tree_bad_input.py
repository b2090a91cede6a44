"""Bad input (DESIGN §7, issue 3): each gets the right gRPC status (or, inside a collector's stream, a
Rejection) with a message saying what and why, is counted, and disturbs nothing else.

Raw RankMessages go straight to the agent's Unix socket through ingest_pb2_grpc.AgentStub (bypassing
the SDK's own checks); raw SummaryBatches go to collectors through forward_pb2_grpc. Throughout, a
"good" job of real SDK ranks keeps logging, and must come out exact at the root.
"""

from __future__ import annotations

import os
import queue
import subprocess
import time
from dataclasses import dataclass, field

import grpc
import numpy as np
import pytest
from pyroaring import BitMap

import telemetry
from collectors.common.keys import Key
from collectors.common.validation import DEFAULT_MAX_MESSAGE_BYTES
from helpers_tree import (
    RawChild,
    api_get,
    counters,
    events,
    hanging_job,
    make_agent,
    make_collector,
    make_root,
    spawn_root,
    steps,
    stop_all,
    summary_of,
    wait_for,
    window,
)
from telemetry import Summary
from telemetry.v1 import forensics_pb2, forward_pb2, ingest_pb2, ingest_pb2_grpc, summary_pb2

INVALID = grpc.StatusCode.INVALID_ARGUMENT
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
EXISTS = grpc.StatusCode.ALREADY_EXISTS
MAX_METRICS = 8


# ---------------------------------------------------------------- fixtures
@pytest.fixture
def foreign_pid():
    """The pid of a live process that is not this one."""
    proc = subprocess.Popen(["sleep", "120"])
    yield proc.pid
    proc.kill()
    proc.wait(5)


@dataclass
class Tree:
    root: object
    agent: object
    runs: list = field(default_factory=list)  # closed (briefly) at teardown, whatever the test did

    @property
    def api(self) -> str:
        return self.root.api_address

    def stub(self) -> ingest_pb2_grpc.AgentStub:
        return ingest_pb2_grpc.AgentStub(grpc.insecure_channel(f"unix:{self.agent.socket_path}"))


@pytest.fixture
def tree(tmp_path):
    root = make_root(tmp_path / "root.db")
    agent = make_agent([root.address], tmp_path / "a.sock", "agent0", max_metrics_per_job=MAX_METRICS)
    made = Tree(root, agent)
    yield made
    for run in made.runs:
        run.close(0.1)
    stop_all(agent, root)


class GoodJob:
    """Two real SDK ranks of job "good" (world size 2) on the same agent."""

    def __init__(self, tree: Tree, job: str = "good") -> None:
        self.tree, self.job = tree, job
        self.runs = [telemetry.init(job=job, rank=r, world_size=2, agent=f"unix:{tree.agent.socket_path}")
                     for r in range(2)]
        tree.runs.extend(self.runs)
        assert all(run.wait_connected(10) for run in self.runs)
        self.last = 0

    def log(self, n: int) -> None:
        for step in range(self.last + 1, self.last + n + 1):
            for rank, run in enumerate(self.runs):
                run.log(step, loss=step + rank / 4)
                run.end_step(step)
        self.last += n

    def finish(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        closed = [run.close(max(0.1, deadline - time.monotonic())) for run in self.runs]
        assert all(closed), "the good ranks' data is durable at the root"
        rows = steps(self.tree.api, self.job, "loss")
        assert [(r["step"], r["count"], r["missing"], r["min"], r["argmax"]) for r in rows] == [
            (s, 2, [], float(s), 1) for s in range(1, self.last + 1)]


def hello(job: str = "solo", rank: int = 0, world_size: int = 1, pid: int = 0) -> ingest_pb2.RankMessage:
    return ingest_pb2.RankMessage(hello=ingest_pb2.RankHello(job=job, rank=rank, world_size=world_size,
                                                             host="h", pid=pid or os.getpid()))


def batch(metrics: dict[str, list[float]], job: str = "solo", rank: int = 0, seq: int = 1,
          step: int = 1) -> ingest_pb2.RankMessage:
    return ingest_pb2.RankMessage(batch=ingest_pb2.RankBatch(job=job, rank=rank, seq=seq, steps=[
        ingest_pb2.RankStepBatch(step=step, closed=True, metrics=[
            ingest_pb2.MetricValues(metric=m, values=v) for m, v in metrics.items()])]))


def refused(stub: ingest_pb2_grpc.AgentStub, messages: list) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        list(stub.Stream(iter(messages), timeout=10))
    return info.value


# ---------------------------------------------------------------- rank streams at the agent
# (name, messages given the foreign pid, status, what the message must say)
RANK_CASES = [
    ("rank_equal_to_world", lambda pid: [hello("good", rank=2, world_size=2, pid=pid)],
     INVALID, "rank 2 is out of range for world size 2"),
    ("rank_far_out_of_range", lambda pid: [hello("good", rank=70_000, world_size=2, pid=pid)],
     INVALID, "rank 70000 is out of range for world size 2"),
    ("world_size_zero", lambda pid: [hello("fresh", rank=0, world_size=0, pid=pid)], INVALID, "world_size"),
    ("world_size_above_the_cap", lambda pid: [hello("vast", rank=0, world_size=2**31 - 1, pid=pid)],
     INVALID, "above this tier's cap of 1048576 ranks"),
    ("world_size_disagrees", lambda pid: [hello("good", rank=0, world_size=3, pid=pid)],
     INVALID, "has world size 2"),
    ("bad_job_name", lambda pid: [hello("no spaces here", pid=pid)], INVALID, "job name"),
    ("batch_before_hello", lambda pid: [batch({"loss": [1.0]})], INVALID, "first message"),
    ("batch_for_another_job", lambda pid: [hello(pid=pid), batch({"loss": [1.0]}, job="good")],
     INVALID, "registered for 'solo'"),
    ("batch_for_another_rank", lambda pid: [hello(pid=pid), batch({"loss": [1.0]}, rank=1)],
     INVALID, "registered for rank 0"),
    ("second_hello_for_another_rank", lambda pid: [hello(pid=pid), hello("solo2", pid=pid)],
     INVALID, "one stream, one rank"),
    ("attempt_beyond_2_63", lambda pid: [ingest_pb2.RankMessage(hello=ingest_pb2.RankHello(
        job="good", rank=0, world_size=1, host="h", pid=pid, attempt=2**64 - 1))], INVALID, "not in [0, 2**63)"),
    ("duplicate_rank_from_live_pid", lambda pid: [hello("good", rank=1, world_size=2, pid=pid)],
     EXISTS, f"already registered by live pid {os.getpid()}"),
    ("metric_uppercase", lambda pid: [hello(pid=pid), batch({"Loss": [1.0]})], INVALID, "'Loss'"),
    ("metric_dash", lambda pid: [hello(pid=pid), batch({"loss-total": [1.0]})], INVALID, "'loss-total'"),
    ("metric_too_long", lambda pid: [hello(pid=pid), batch({"x" * 65: [1.0]})], INVALID, "x" * 65),
    ("metric_empty", lambda pid: [hello(pid=pid), batch({"": [1.0]})], INVALID, "[a-z0-9_.]{1,64}"),
    ("metric_unicode", lambda pid: [hello(pid=pid), batch({"lößung": [1.0]})], INVALID, "[a-z0-9_.]{1,64}"),
    ("metric_space", lambda pid: [hello(pid=pid), batch({"grad norm": [1.0]})], INVALID, "'grad norm'"),
    ("heartbeat_extra_bad_name", lambda pid: [hello(pid=pid), ingest_pb2.RankMessage(
        heartbeat=ingest_pb2.Heartbeat(time_ns=time.time_ns(), extra={"Bad/Name": 1.0}))], INVALID, "'Bad/Name'"),
    ("too_many_metrics", lambda pid: [hello(pid=pid), batch({f"m{i}": [1.0] for i in range(MAX_METRICS + 1)})],
     EXHAUSTED, f"would have {MAX_METRICS + 1} distinct metrics, over its cap of {MAX_METRICS}"),
]


@pytest.mark.parametrize("case", RANK_CASES, ids=[c[0] for c in RANK_CASES])
def test_bad_rank_stream_gets_status_and_disturbs_nothing(tree, foreign_pid, case):
    _, messages, code, says = case
    good = GoodJob(tree)
    good.log(2)
    error = refused(tree.stub(), messages(foreign_pid))
    assert error.code() == code, error.details()
    assert says in error.details()
    assert tree.agent.node.counters["bad_inputs"] == 1, "counted once"
    good.log(2)
    good.finish()


def test_metric_names_at_the_limit_are_accepted(tree):
    name = "a.b_c." + "9" * 58
    assert len(name) == 64
    replies = list(tree.stub().Stream(iter([hello("names"), batch({name: [1.0, 2.0], "x": [3.0]}, job="names")]),
                                      timeout=10))
    assert [r.status for r in replies][:2] == [ingest_pb2.RankAck.REGISTERED, ingest_pb2.RankAck.RECEIVED]
    rows = wait_for(lambda: steps(tree.api, "names", name), 10, what="the window at the root")
    assert rows[0]["count"] == 2 and tree.agent.node.counters["bad_inputs"] == 0


def test_metric_cap_is_per_job(tree):
    """One job at the cap does not stop another job, nor the metrics the capped job already has."""
    stub = tree.stub()
    full = {f"m{i}": [float(i)] for i in range(MAX_METRICS)}
    list(stub.Stream(iter([hello("capped"), batch(full, job="capped")]), timeout=10))
    error = refused(stub, [hello("capped"), batch({"m0": [1.0], "one_more": [1.0]}, job="capped", seq=2, step=2)])
    assert error.code() == EXHAUSTED and "'one_more'" in error.details()
    list(stub.Stream(iter([hello("capped"), batch({"m1": [5.0]}, job="capped", seq=3, step=3)]), timeout=10))
    good = GoodJob(tree)
    good.log(3)
    good.finish()
    wait_for(lambda: len(steps(tree.api, "capped", "m1")) == 2, 10, what="the capped job's known metric")


def test_duplicate_rank_is_accepted_once_the_old_pid_is_dead(tree):
    sleeper = subprocess.Popen(["sleep", "120"])
    held: queue.Queue = queue.Queue()
    held.put(hello("takeover", pid=sleeper.pid))
    first = tree.stub().Stream(iter(held.get, None), timeout=30)  # stays open
    try:
        assert next(first).status == ingest_pb2.RankAck.REGISTERED
        error = refused(tree.stub(), [hello("takeover")])
        assert error.code() == EXISTS and f"live pid {sleeper.pid}" in error.details()
        sleeper.kill()
        sleeper.wait(5)
        replies = tree.stub().Stream(iter([hello("takeover")]), timeout=10)
        assert next(replies).status == ingest_pb2.RankAck.REGISTERED, "a restarted rank may take its place"
    finally:
        held.put(None)
        first.cancel()
        sleeper.kill()
        sleeper.wait(5)


# ---------------------------------------------------------------- the SDK's own check
def test_sdk_log_refuses_bad_metric_names(tree):
    run = telemetry.init(job="sdk", rank=0, world_size=1, agent=f"unix:{tree.agent.socket_path}")
    try:
        for name in ("Loss", "loss-total", "x" * 65, "grad norm", "lößung", ""):
            with pytest.raises(ValueError, match=r"must match \[a-z0-9_\.\]\{1,64\}"):
                run.log(1, **{"fine": 1.0, name: 2.0})
        run.log(1, **{"loss": 3.0, "a" * 64: 4.0})
        run.end_step(1)
        assert run.close(10)
        assert [r["count"] for r in steps(tree.api, "sdk", "loss")] == [1]
        assert steps(tree.api, "sdk", "fine") == [], "a refused call records nothing"
        assert tree.agent.node.counters["bad_inputs"] == 0
    finally:
        run.close(0.1)


# ---------------------------------------------------------------- oversized messages
def _big_rank_message() -> ingest_pb2.RankMessage:
    values = np.zeros(2_200_000)  # 17.6 MB > the 16 MiB limit
    return batch({"x": values}, job="big")


def _big_summary_batch() -> forward_pb2.SummaryBatch:
    summary = summary_pb2.Summary(sketch=summary_pb2.Sketch(max_centroids=200, means=b"\0" * 17_000_000))
    return forward_pb2.SummaryBatch(sender_id="big", seq=1, windows=[forward_pb2.WindowSummary(
        key=Key("big", "x", 1).to_proto(), summary=summary)])


def test_oversized_rank_message_is_resource_exhausted(tree):
    good = GoodJob(tree)
    good.log(2)
    error = refused(tree.stub(), [hello("big"), _big_rank_message()])
    assert error.code() == EXHAUSTED
    assert str(DEFAULT_MAX_MESSAGE_BYTES) in error.details(), "the message names the limit"
    good.log(2)
    good.finish()


def test_oversized_summary_batch_is_resource_exhausted(tree):
    child = RawChild(tree.root.address, "big")
    other = RawChild(tree.root.address, "fine")
    try:
        assert child.ack().seq == 0
        child.send(_big_summary_batch())
        assert child.ack() is None
        assert child.error.code() == EXHAUSTED and str(DEFAULT_MAX_MESSAGE_BYTES) in child.error.details()
        other.ack()
        seq = other.batch(window("fine", "loss", 1, {0: 1.0}, expected=1))
        other.ack_for(seq, forward_pb2.Ack.DURABLE)
    finally:
        child.close()
        other.close()


def test_oversized_messages_are_counted(tree):
    """Issue 3 §6: oversized messages, like every bad input, are counted."""
    refused(tree.stub(), [hello("big"), _big_rank_message()])
    child = RawChild(tree.root.address, "big")
    try:
        child.send(_big_summary_batch())
        while child.ack() is not None:
            pass
    finally:
        child.close()
    assert tree.agent.node.counters["bad_inputs"] == 1, "the agent counted the oversized rank message"
    assert tree.root.node.counters["bad_inputs"] == 1, "the root counted the oversized summary batch"


# ---------------------------------------------------------------- malformed summaries at a collector
def _valid() -> summary_pb2.Summary:
    return summary_of({0: 1.0, 1: 2.0}).to_proto()


def _mutated(**changes) -> summary_pb2.Summary:
    msg = _valid()
    for name, value in changes.items():
        if name == "clear":
            for cleared in value:
                msg.ClearField(cleared)
        elif name == "sketch_means":
            msg.sketch.means = value
        elif name == "sketch_weights":
            msg.sketch.weights = value
        else:
            setattr(msg, name, value)
    return msg


def _key(**fields) -> summary_pb2.WindowKey:
    return summary_pb2.WindowKey(**{"job": "mal", "metric": "loss", "step": 1, **fields})


MALFORMED = [
    ("sources_not_roaring", _key(), lambda: _mutated(sources=b"\x01\x02 not a bitmap"), "portable roaring bitmap"),
    ("sketch_bytes_ragged", _key(), lambda: _mutated(sketch_means=b"\0" * 7), "whole number of float64s"),
    ("sketch_weights_mismatch", _key(), lambda: _mutated(
        sketch_weights=np.array([1.0, 5.0], "<f8").tobytes()), "weights sum"),
    ("top_missing", _key(), lambda: _mutated(clear=["top_values", "top_sources"]), "top/bottom"),
    ("min_above_max", _key(), lambda: _mutated(min=3.0), "min"),
    ("argmax_not_a_source", _key(), lambda: _mutated(argmax=7), "argmin/argmax"),
    ("nonfinite_disagree", _key(), lambda: _mutated(nonfinite_count=3), "nonfinite"),
    ("key_without_window", summary_pb2.WindowKey(job="mal", metric="loss"), _valid, "neither step nor bucket"),
    ("bucket_width_zero", summary_pb2.WindowKey(job="mal", metric="loss", bucket=summary_pb2.TimeBucket(
        start_ms=1000, width_ms=0)), _valid, "width_ms"),
    ("metric_name", _key(metric="Loss!"), _valid, "metric name"),
    ("job_name", _key(job="a job"), _valid, "job name"),
]


@pytest.mark.parametrize("tier", ["rack", "root"])
def test_malformed_windows_get_rejections_and_the_stream_goes_on(tmp_path, tier):
    root = make_root(tmp_path / "root.db")
    rack = make_collector([root.address], "rack0") if tier == "rack" else None
    target = rack or root
    child = RawChild(target.address, "mal")
    other = RawChild(target.address, "honest")
    try:
        child.ack()
        other.ack()
        for n, (name, key, summary, says) in enumerate(MALFORMED, start=1):
            good = forward_pb2.WindowSummary(key=_key(step=100 + n), summary=summary_of({n: float(n)}).to_proto(),
                                              expected=1)
            bad = forward_pb2.WindowSummary(key=key, summary=summary(), expected=2)
            seq = child.batch(good, bad)
            ack = child.ack()
            assert ack is not None, f"{name}: the stream must go on ({child.error})"
            assert ack.seq == seq
            assert [r.index for r in ack.rejections] == [1], name
            assert not ack.rejections[0].overlapping_sources, name
            assert says in ack.rejections[0].reason, f"{name}: {ack.rejections[0].reason}"
        assert counters(target)["bad_inputs"] == len(MALFORMED)
        seq = other.batch(window("honest", "loss", 1, {0: 1.0, 1: 2.0}, expected=2))
        other.ack_for(seq, forward_pb2.Ack.DURABLE)
        wait_for(lambda: len(steps(root.api_address, "mal", "loss")) == len(MALFORMED), 10,
                 what="the good windows of the malformed child's batches")
    finally:
        child.close()
        other.close()
        stop_all(rack, root)


def test_collector_metric_cap_rejects_the_extra_metric(tmp_path):
    root = make_root(tmp_path / "root.db", max_metrics_per_job=2)
    child = RawChild(root.address, "many")
    try:
        child.ack()
        seq = child.batch(*(window("cap", f"m{i}", 1, {0: 1.0}, expected=1) for i in range(3)))
        ack = child.ack()
        assert ack.seq == seq and [r.index for r in ack.rejections] == [2]
        assert "over its cap of 2" in ack.rejections[0].reason
        child.ack_for(seq, forward_pb2.Ack.DURABLE)
        assert [len(steps(root.api_address, "cap", f"m{i}")) for i in range(3)] == [1, 1, 0]
    finally:
        child.close()
        stop_all(root)


def test_sketch_of_another_shape_is_rejected_and_does_not_stall_others(tmp_path):
    """A summary with another k (or max_centroids) cannot merge with the window's other parts."""
    root = make_root(tmp_path / "root.db")
    rack = make_collector([root.address], "rack0")
    child = RawChild(rack.address, "odd")
    other = RawChild(rack.address, "honest")
    try:
        child.ack()
        other.ack()
        odd = Summary(k=4)
        odd.add(2.0, 1)
        seq = child.batch(window("shape", "loss", 1, {0: 1.0}, expected=2),
                          forward_pb2.WindowSummary(key=Key("shape", "loss", 1).to_proto(), summary=odd.to_proto(),
                                                    expected=2))
        ack = child.ack()
        seq2 = other.batch(window("honest", "loss", 1, {0: 1.0}, expected=1))
        other.ack_for(seq2, forward_pb2.Ack.DURABLE, timeout=3)
        assert ack.seq == seq and [r.index for r in ack.rejections] == [1], "the odd-shaped part is refused"
        assert "k" in ack.rejections[0].reason
    finally:
        child.close()
        other.close()
        stop_all(rack, root)


# ---------------------------------------------------------------- inputs that must not wedge the tree
def _send_quietly(stub: ingest_pb2_grpc.AgentStub, messages: list) -> None:
    """Send a raw rank stream; a refusal is fine too (what matters is what happens to everybody else)."""
    try:
        list(stub.Stream(iter(messages), timeout=10))
    except grpc.RpcError:
        pass


def test_step_beyond_int64_does_not_wedge_the_agents_link(tree, foreign_pid):
    """A step >= 2**63 (a valid uint64 on the wire) must not block every other rank of the host."""
    good = GoodJob(tree)
    good.log(1)
    _send_quietly(tree.stub(), [hello("evil", pid=foreign_pid), batch({"loss": [1.0]}, job="evil", step=2**63)])
    time.sleep(0.3)
    good.log(2)
    good.finish(timeout=6)
    wait_for(lambda: counters(tree.root)["bad_inputs"] >= 1, 5, what="the refusal to be counted")


def test_absurd_world_size_does_not_stall_the_root(tmp_path, foreign_pid):
    """One rank declaring world_size 2**32-1 must not freeze the root for every other job."""
    root = spawn_root(tmp_path, deadline_floor=0.5)
    agent = make_agent([root.ready["address"]], tmp_path / "a.sock", "agent0")
    runs = []
    try:
        stub = ingest_pb2_grpc.AgentStub(grpc.insecure_channel(f"unix:{agent.socket_path}"))
        _send_quietly(stub, [hello("huge", world_size=2**32 - 1, pid=foreign_pid),
                             batch({"loss": [1.0]}, job="huge")])
        time.sleep(1.5)  # the root finalises "huge" step 1 at its deadline
        runs = [telemetry.init(job="ok", rank=r, world_size=2, agent=f"unix:{agent.socket_path}") for r in range(2)]
        for rank, run in enumerate(runs):
            run.log(1, loss=float(rank))
            run.end_step(1)
        deadline = time.monotonic() + 5
        assert all([run.close(max(0.1, deadline - time.monotonic())) for run in runs]), \
            "the other job's step is durable at the root"
        status, body = api_get(root.ready["api"], "/api/v1/jobs/ok/steps?metric=loss")
        assert status == 200 and [r["count"] for r in body["steps"]] == [2]
    finally:
        for run in runs:
            run.close(0.1)
        stop_all(agent)
        root.kill()


def test_sdk_rank_over_the_metric_cap_keeps_delivering_its_other_metrics(tree):
    """The refused batch is refused; the rank's later, valid batches must still arrive (not be retried forever)."""
    run = telemetry.init(job="greedy", rank=0, world_size=1, agent=f"unix:{tree.agent.socket_path}")
    try:
        assert run.wait_connected(10)
        run.log(1, **{f"m{i}": 1.0 for i in range(MAX_METRICS + 1)})
        run.end_step(1)
        wait_for(lambda: tree.agent.node.counters["bad_inputs"] >= 1, 10, what="the agent to refuse the batch")
        for step in range(2, 5):
            run.log(step, m0=float(step))
            run.end_step(step)
        assert run.close(5) is False, "close() is True only when nothing the rank logged was dropped"
        assert run.stats["unacknowledged_batches"] == 0, "the rank's later batches became durable"
        assert [r["step"] for r in steps(tree.api, "greedy", "m0")] == [2, 3, 4]
        assert run.stats["refused_batches"] >= 1
    finally:
        run.close(0.1)


def test_a_hostile_child_next_to_a_healthy_job_disturbs_nothing_and_its_hang_is_still_raised(tmp_path):
    """Issue 14 item 3: sizes an input declares are capped and bitmaps never expanded. A rogue child sends
    rank states claiming 2**32 stuck ranks and a window expecting 2**31 - 1 ranks, at the same root as a
    healthy 2-rank job. The rogue unit is refused with INVALID_ARGUMENT; the healthy job's figures stay exact,
    and when one of its ranks stops at step 4 the hang is raised, naming it."""
    root = make_root(tmp_path / "root.db")
    agent = make_agent([root.address], tmp_path / "a.sock", "agent0")
    runs = []
    try:
        rogue = RawChild(root.address, "rogue")
        huge = BitMap()
        huge.add_range(0, 2**32)
        states = forward_pb2.RankStates(job="victim", world_size=2, stuck=huge.serialize())
        rogue.send(forward_pb2.SummaryBatch(sender_id="rogue", seq=1, ranks=[states]))
        assert rogue.ack(10) is not None and rogue.ack(10) is None  # the hello unit, then the end of the stream
        assert rogue.error is not None and rogue.error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "cap of 1048576 ranks" in rogue.error.details()
        rogue = RawChild(root.address, "rogue2")
        seq = rogue.batch(window("victim", "loss", 1, {0: 999.0}, expected=2**31 - 1))
        ack = rogue.ack_for(seq, forward_pb2.Ack.REJECTED_OVERLAP)  # the unit's refused windows are named
        assert "cap of 1048576 ranks" in ack.rejections[0].reason

        runs = hanging_job(agent)  # rank 1 never reaches step 4: a hang
        rows = wait_for(lambda: len(steps(root.api_address, "healthy", "loss")) >= 3
                        and steps(root.api_address, "healthy", "loss"), what="the healthy steps")
        assert [(r["step"], r["count"], r["min"], r["argmax"]) for r in rows[:3]] == [
            (s, 2, float(s), 1) for s in range(1, 4)]
        hang = wait_for(lambda: events(root.api_address, "healthy", "hang"), timeout=30,
                        what="the healthy job's hang raised")
        assert hang[0]["ranks"] == [1] and hang[0]["step"] == 4
        _, victim = api_get(root.api_address, "/api/v1/jobs/victim/steps?metric=loss")
        assert victim.get("steps", []) == []
        rogue.close()
    finally:
        for run in runs:
            run.close(0.1)
        stop_all(agent, root)


def test_a_value_logged_after_its_step_closed_is_counted_not_lost_silently(tree):
    """Issue 14 item 1: `run.log(5, ...)` after the rank closed step 5 cannot be merged (the rank already
    counts once there), so it is dropped - and counted, at the rank (run.stats, close() False) and in the
    tree's delivery counters as late_dropped."""
    runs = [telemetry.init(job="late", rank=r, world_size=2, agent=f"unix:{tree.agent.socket_path}") for r in range(2)]
    tree.runs.extend(runs)
    for step in range(1, 7):
        for rank, run in enumerate(runs):
            with run.step(step):
                run.log(step, loss=float(step + rank))
    wait_for(lambda: len(steps(tree.api, "late", "loss")) >= 5, what="steps 1-5 finalised")
    runs[0].log(5, loss=7.0)  # step 5 closed long ago
    runs[0].end_step(7)
    runs[1].end_step(7)
    wait_for(lambda: runs[0].stats["late_dropped_values"] == 1, what="the rank told of its dropped value")
    wait_for(lambda: counters(tree.root)["late_dropped"] == 1, what="late_dropped in the root's counters")
    assert [r["count"] for r in steps(tree.api, "late", "loss") if r["step"] == 5] == [2]
    assert runs[1].close(20) is True
    assert runs[0].close(20) is False  # everything durable, but one value it logged was dropped
    assert runs[0].stats["unacknowledged_batches"] == 0


def test_a_refused_batch_of_too_many_names_charges_nothing(tree):
    """One log() with 300 metric names is refused whole, and the job's real metrics still get in after it."""
    run = telemetry.init(job="greedy2", rank=0, world_size=1, agent=f"unix:{tree.agent.socket_path}")
    tree.runs.append(run)
    assert run.wait_connected(10)
    run.log(1, **{f"m{i}": 1.0 for i in range(300)})
    run.end_step(1)
    wait_for(lambda: run.stats["refused_batches"] >= 1, what="the batch refused")
    for step in range(2, 4):
        with run.step(step):
            run.log(step, loss=float(step))
    wait_for(lambda: [r["step"] for r in steps(tree.api, "greedy2", "loss")] == [2, 3], what="loss delivered")
    assert [r["step"] for r in steps(tree.api, "greedy2", "step_time")] == [2, 3]


def test_a_ten_megabyte_job_name_is_not_echoed_back(tree):
    error = refused(tree.stub(), [hello("j" * 10_000_000)])
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "(10000000 characters)" in error.details() and len(error.details()) < 300


def test_a_second_live_stream_claiming_a_sender_id_is_refused_and_the_first_keeps_its_acks(tmp_path):
    root = make_root(tmp_path / "root.db")
    try:
        real = RawChild(root.address, "agent-h1")
        real.ack(10)
        impostor = RawChild(root.address, "agent-h1")
        assert impostor.ack(10) is None  # the stream ended without an answer
        assert impostor.error.code() == grpc.StatusCode.ALREADY_EXISTS
        assert "already uses sender_id 'agent-h1'" in impostor.error.details()
        seq = real.batch(window("j", "loss", 0, {0: 1.0}, expected=1))
        real.ack_for(seq, forward_pb2.Ack.DURABLE)
        huge = RawChild(root.address, "x" * 10_000_000)
        assert huge.ack(10) is None and huge.error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert len(huge.error.details()) < 300
        real.close()
        impostor.close()
        huge.close()
    finally:
        stop_all(root)


# ---------------------------------------------------------------- attempts and clocks (issue 26 item 2)
def _beat(time_ns: int, enqueued: float | None = None, seqs: tuple[int, ...] = ()) -> ingest_pb2.RankMessage:
    beat = ingest_pb2.Heartbeat(time_ns=time_ns, current_step=1, fingerprints=[
        forensics_pb2.CollectiveFingerprint(seq=seq, hash=7, what="all_reduce") for seq in seqs])
    if enqueued is not None:
        beat.extra["collective.last_enqueued"] = enqueued
    return ingest_pb2.RankMessage(heartbeat=beat)


def test_heartbeats_stamped_far_from_the_agents_clock_are_refused_and_counted(tree, foreign_pid):
    """Before: 50,000 heartbeats a second apart in the future were 50,000 open buckets (agent 65 -> 132 MB);
    a negative time was stored as a window."""
    good = GoodJob(tree)
    good.log(1)
    now = time.time_ns()
    odd = [now + (3600 + i) * 10**9 for i in range(500)] + [-(10**18), 1, now - 86_400 * 10**9]
    _send_quietly(tree.stub(), [hello("clock", pid=foreign_pid), *(_beat(t) for t in odd), _beat(now)])
    wait_for(lambda: tree.agent.node.counters["bad_inputs"] == len(odd), 10, what="every odd beat counted")
    with tree.agent.node.lock:
        buckets = {key.index for key in tree.agent.service.beats if key.job == "clock"}
    assert len(buckets) <= 2, sorted(buckets)  # this second's (and the next's): nothing else opened
    good.log(2)
    good.finish()


def test_fingerprints_beyond_the_ranks_own_collective_progress_are_refused(tree, foreign_pid):
    """Before: 512 fingerprints near 2**53 from one rank pushed the job's real ones out of every table."""
    good = GoodJob(tree)
    good.log(1)
    now = time.time_ns()
    _send_quietly(tree.stub(), [hello("fp", pid=foreign_pid), _beat(now, enqueued=10, seqs=(9, 10, 11)),
                                _beat(now, enqueued=12, seqs=tuple(range(2**53 - 512, 2**53)))])
    wait_for(lambda: tree.agent.node.counters["bad_inputs"] == 1, 10, what="the far fingerprints counted")
    for table in (tree.agent.service.fingerprints, tree.root.wiring.fingerprints):  # the agent's, the root's
        wait_for(lambda: sorted(m.seq for m in table.get("fp")) == [9, 10, 11], 10,
                 what=f"only the fingerprints within the rank's progress ({sorted(m.seq for m in table.get('fp'))})")
    good.log(2)
    good.finish()


def test_attempts_beyond_2_63_are_refused_at_every_tier(tmp_path):
    """Before: a raw stream's attempt 2**64-1 was accepted (the SDK forbids it), and then lost time exceeded
    wall time; the API's ?attempt= could not reach it."""
    root = make_root(tmp_path / "root.db")
    child = RawChild(root.address, "odd")
    try:
        child.ack()
        far = forward_pb2.WindowSummary(key=Key("j", "loss", 1).to_proto(), summary=summary_of({0: 1.0}).to_proto(),
                                        expected=1)
        far.key.attempt = 2**64 - 1
        seq = 1
        child.send(forward_pb2.SummaryBatch(sender_id="odd", seq=seq, windows=[far]))  # no rank states: they
        ack = child.ack_for(seq, forward_pb2.Ack.REJECTED_OVERLAP)                      # would be refused first
        assert "not in [0, 2**63)" in ack.rejections[0].reason
        child.send(forward_pb2.SummaryBatch(sender_id="odd", seq=seq + 1, ranks=[forward_pb2.RankStates(
            job="j", attempt=2**64 - 1, world_size=1, alive=BitMap([0]).serialize())]))
        while child.ack(10) is not None:  # the first unit's DURABLE, then the end of the stream
            pass
        assert child.error is not None and child.error.code() == INVALID
        assert "not in [0, 2**63)" in child.error.details()
    finally:
        child.close()
        stop_all(root)

