"""The SDK core (issue 3 §1): log() never blocks and keeps a bounded, counted backlog; reconnect with
backoff and resend; torchrun environment defaults; several Runs in one process.
"""

from __future__ import annotations

import time

import grpc
import pytest

import telemetry
from helpers_tree import counters, make_agent, make_root, steps, stop_all, wait_for
from telemetry.sdk import sender as sender_module
from telemetry.v1 import ingest_pb2_grpc


@pytest.fixture
def root(tmp_path):
    server = make_root(tmp_path / "root.db")
    yield server
    stop_all(server)


@pytest.fixture
def closing():
    """Runs made by a test, closed (briefly) whatever happened."""
    runs: list[telemetry.Run] = []
    yield runs
    for run in runs:
        run.close(0.1)


def _delivered(api: str, job: str, metric: str = "x") -> int:
    return sum(row["count"] for row in steps(api, job, metric))


# ---------------------------------------------------------------- never blocks, bounded backlog
def test_log_never_blocks_without_an_agent_and_drops_past_the_buffer(tmp_path, root, closing):
    sock = tmp_path / "agent.sock"  # nothing listens here yet
    run = telemetry.init(job="nb", rank=0, world_size=1, agent=f"unix:{sock}", buffer_records=1000)
    closing.append(run)
    n = 10_000
    worst = 0.0
    start = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter()
        run.log(1 + i // 1000, x=float(i))
        worst = max(worst, time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    assert elapsed < 2.0, f"10k log() calls took {elapsed:.3f} s with no agent"
    assert worst < 0.5, f"one log() call took {worst:.3f} s"
    assert len(run._records) <= 1000, "the in-memory buffer is bounded"
    assert not run.connected
    # Drops are counted (once the sender thread has looked at the buffer).
    dropped = wait_for(lambda: run.stats["dropped_values"], 10, what="the drop to be counted")
    assert dropped > 0
    # The agent comes up: what was kept is delivered, and the drop is reported up the tree.
    agent = make_agent([root.address], sock, "agent0")
    try:
        run.end_step(10)
        assert run.close(15) is False  # what was kept is durable, but values were dropped on the way
        assert run.stats["unacknowledged_batches"] == 0
        dropped = run.stats["dropped_values"]
        assert _delivered(root.api_address, "nb") + dropped == n, "every value is either delivered or counted"
        rows = steps(root.api_address, "nb", "x")
        assert rows[-1]["step"] == 10 and rows[-1]["max"] == n - 1, "the newest values are the ones kept"
        wait_for(lambda: counters(root)["sdk_dropped"] == dropped, 5, what="sdk_dropped at the root")
    finally:
        stop_all(agent)


def test_backlog_is_bounded_by_max_backlog_bytes_oldest_dropped(tmp_path, root, closing):
    sock = tmp_path / "agent.sock"
    run = telemetry.init(job="bl", rank=0, world_size=1, agent=f"unix:{sock}", max_backlog_bytes=20_000,
                         flush_interval_s=0.005)
    closing.append(run)
    n, chunk = 10_000, 1000
    for c in range(n // chunk):
        for i in range(chunk):
            run.log(c + 1, x=float(c * chunk + i))
        run.end_step(c + 1)
        wait_for(lambda: not run._records, 10, what="the sender to batch the chunk")
    dropped = run.stats["dropped_values"]
    assert n - 2500 <= dropped < n, f"dropped {dropped}: the backlog keeps at most 20,000 bytes (8 per value)"
    agent = make_agent([root.address], sock, "agent0")
    try:
        assert run.close(15) is False  # the backlog overflowed: not everything logged reached the root
        assert run.stats["unacknowledged_batches"] == 0
        assert _delivered(root.api_address, "bl") == n - dropped
        delivered_steps = [row["step"] for row in steps(root.api_address, "bl", "x")]
        assert delivered_steps[-1] == 10 and 1 not in delivered_steps, "the oldest batches were the ones dropped"
        wait_for(lambda: counters(root)["sdk_dropped"] == dropped, 5, what="sdk_dropped at the root")
    finally:
        stop_all(agent)


# ---------------------------------------------------------------- reconnect
def test_agent_started_after_the_ranks_receives_everything(tmp_path, root, closing):
    sock = tmp_path / "late.sock"
    runs = [telemetry.init(job="late", rank=r, world_size=4, agent=f"unix:{sock}") for r in range(4)]
    closing.extend(runs)
    for step in range(1, 6):
        for rank, run in enumerate(runs):
            run.log(step, x=step * 100.0 + rank)
            run.end_step(step)
    time.sleep(1.5)  # the senders are backing off by now
    assert not any(run.connected for run in runs)
    agent = make_agent([root.address], sock, "agent0")
    try:
        assert all(run.wait_connected(10) for run in runs), "each rank reconnects on its own"
        for step in range(6, 11):
            for rank, run in enumerate(runs):
                run.log(step, x=step * 100.0 + rank)
                run.end_step(step)
        assert all([run.close(15) for run in runs])
        rows = steps(root.api_address, "late", "x")
        assert [(r["step"], r["count"], r["missing"], r["min"], r["argmax"]) for r in rows] == [
            (s, 4, [], s * 100.0, 3) for s in range(1, 11)]
        assert all(run.stats["dropped_values"] == 0 for run in runs)
    finally:
        stop_all(agent)


def test_agent_restart_mid_run_resends_unacknowledged_batches(tmp_path, root, closing):
    sock = tmp_path / "a.sock"
    agent = make_agent([root.address], sock, "agent0")
    runs = [telemetry.init(job="bounce", rank=r, world_size=2, agent=f"unix:{sock}") for r in range(2)]
    closing.extend(runs)
    try:
        for step in range(1, 4):
            for rank, run in enumerate(runs):
                run.log(step, x=float(step + rank))
                run.end_step(step)
        wait_for(lambda: len(steps(root.api_address, "bounce", "x")) == 3, 10, what="steps 1-3")
        agent.stop(0)
        for step in range(4, 7):  # logged while the agent is down
            for rank, run in enumerate(runs):
                run.log(step, x=float(step + rank))
                run.end_step(step)
        time.sleep(0.3)
        agent = make_agent([root.address], sock, "agent0")
        assert all([run.close(15) for run in runs])
        assert [(r["step"], r["count"]) for r in steps(root.api_address, "bounce", "x")] == [
            (s, 2) for s in range(1, 7)]
    finally:
        stop_all(agent)


# ---------------------------------------------------------------- torchrun environment, several Runs
def test_init_defaults_from_the_torchrun_environment(tmp_path, root, monkeypatch, closing):
    agent = make_agent([root.address], tmp_path / "env.sock", "agent0")
    try:
        monkeypatch.setenv("RANK", "2")
        monkeypatch.setenv("WORLD_SIZE", "3")
        monkeypatch.setenv("LOCAL_RANK", "1")
        monkeypatch.setenv("TORCHELASTIC_RUN_ID", "elastic-42")
        monkeypatch.setenv("TELEMETRY_AGENT", f"unix:{agent.socket_path}")
        run = telemetry.init()
        closing.append(run)
        assert (run.job, run.rank, run.world_size, run.local_rank) == ("elastic-42", 2, 3, 1)
        assert run.agent == f"unix:{agent.socket_path}"
        with run.step(1):
            run.log(1, loss=0.5)
        assert run.close(10)
        info = agent.registry.ranks[("elastic-42", 2)]
        assert (info.world_size, info.local_rank) == (3, 1)
        row = steps(root.api_address, "elastic-42", "loss")[0]
        assert (row["count"], row["argmin"], row["missing"], row["expected"]) == (1, 2, [0, 1], 3)
        assert steps(root.api_address, "elastic-42", "step_time")[0]["count"] == 1
        # Explicit arguments win over the environment.
        other = telemetry.init(job="explicit", rank=0, world_size=1, local_rank=0)
        closing.append(other)
        assert (other.job, other.rank, other.world_size, other.local_rank) == ("explicit", 0, 1, 0)
        assert other.close(10)
    finally:
        stop_all(agent)


def test_init_defaults_without_torchrun_and_bad_environment(monkeypatch, tmp_path):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TELEMETRY_AGENT", f"unix:{tmp_path / 'nobody.sock'}")
    run = telemetry.init()
    try:
        assert (run.job, run.rank, run.world_size, run.local_rank) == ("default", 0, 1, 0)
    finally:
        run.close(0.1)
    monkeypatch.setenv("RANK", "two")
    with pytest.raises(ValueError, match="RANK"):
        telemetry.init()
    monkeypatch.setenv("RANK", "4")
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(ValueError, match="rank 4"):
        telemetry.init()


def test_several_runs_in_one_process(tmp_path, root, closing):
    agent = make_agent([root.address], tmp_path / "multi.sock", "agent0")
    try:
        address = f"unix:{agent.socket_path}"
        jobs = {"alpha": 3, "beta": 2}
        runs = {(job, r): telemetry.init(job=job, rank=r, world_size=w, agent=address)
                for job, w in jobs.items() for r in range(w)}
        closing.extend(runs.values())
        for step in range(1, 5):
            for (job, rank), run in runs.items():
                with run.step(step):
                    run.log(step, loss=step + rank / 10 + (100 if job == "beta" else 0))
        assert all([run.close(10) for run in runs.values()])
        for job, world in jobs.items():
            rows = steps(root.api_address, job, "loss")
            offset = 100 if job == "beta" else 0
            assert [(r["step"], r["count"], r["missing"], r["argmax"], r["max"]) for r in rows] == [
                (s, world, [], world - 1, s + (world - 1) / 10 + offset) for s in range(1, 5)]
            assert all(r["count"] == world for r in steps(root.api_address, job, "step_time"))
        assert len({id(run._sender) for run in runs.values()}) == len(runs)
    finally:
        stop_all(agent)


def test_the_stream_is_registered_with_the_channel_as_the_generated_stub_registers_it():
    """The sender's hand-built stream (its own request serialiser) registers its method with the channel as
    ingest_pb2_grpc.AgentStub does (`_registered_method=True`): one registration per channel, shared by both."""
    channel = grpc.insecure_channel("127.0.0.1:1")  # nothing is called: no connection is made
    try:
        ours = sender_module._agent_stream(channel)
        generated = ingest_pb2_grpc.AgentStub(channel).Stream
        assert ours._registered_call_handle is not None  # grpc's _StreamStreamMultiCallable keeps it
        assert ours._registered_call_handle == generated._registered_call_handle
    finally:
        channel.close()


# ---------------------------------------------------------------- a step the wire cannot carry
@pytest.mark.parametrize("bad_step", [-1, 2**53 + 1, 2**64, 1.5],
                         ids=["negative", "beyond_2_53", "beyond_uint64", "float"])
def test_a_bad_step_never_costs_the_other_values(tmp_path, root, closing, bad_step):
    """log() with a step that is not a uint64 must be refused on the spot (ValueError/TypeError), not fail
    later on the sender thread and take every value drained with it, uncounted, while close() says True."""
    agent = make_agent([root.address], tmp_path / "s.sock", "agent0")
    try:
        run = telemetry.init(job="steps", rank=0, world_size=1, agent=f"unix:{agent.socket_path}")
        closing.append(run)
        assert run.wait_connected(10)
        for step in range(1, 4):
            run.log(step, loss=float(step))
            if step == 2:
                try:
                    run.log(bad_step, loss=99.0)
                except (ValueError, TypeError):
                    pass
            run.end_step(step)
        closed = run.close(10)
        rows = steps(root.api_address, "steps", "loss")
        assert [(r["step"], r["count"], r["max"]) for r in rows] == [(s, 1, float(s)) for s in range(1, 4)], (
            f"close() said {closed}, stats {run.stats}")
        assert closed
    finally:
        stop_all(agent)


# ---------------------------------------------------------------- dataloader_wait lands on the step that eats the batch
def _slow_batches(waits: list[float], took: list[float]):
    """Batch k sleeps waits[k]; what it really took (a loaded machine wakes a sleeper late) goes into `took`."""
    for i, wait in enumerate(waits):
        start = time.perf_counter()
        time.sleep(wait)
        took.append(time.perf_counter() - start)
        yield i


WAITS = [0.05, 0.01, 0.12, 0.01, 0.08]  # batch k takes WAITS[k] (at least)


@pytest.mark.parametrize("pattern", ["readme", "inside_step", "end_step"])
def test_wrap_loader_logs_each_wait_on_the_step_that_consumes_the_batch(tmp_path, root, closing, pattern):
    """The README's loop fetches batch `step` before entering `run.step(step)`: its wait belongs to `step`, not
    to the step still current (step - 1), and the last step gets its own wait. Fetching inside the step, or a
    loop closed with end_step, attributes the same way."""
    agent = make_agent([root.address], tmp_path / "loader.sock", "agent0")
    try:
        run = telemetry.init(job=f"loader-{pattern}", rank=0, world_size=1, agent=f"unix:{agent.socket_path}")
        closing.append(run)
        took: list[float] = []
        if pattern == "readme":
            for step, batch in enumerate(run.wrap_loader(_slow_batches(WAITS, took))):
                with run.step(step):
                    run.log(step, batch=batch)
        elif pattern == "inside_step":
            batches = iter(run.wrap_loader(_slow_batches(WAITS, took)))
            for step in range(len(WAITS)):
                with run.step(step):
                    run.log(step, batch=next(batches))
        else:
            for step, batch in enumerate(run.wrap_loader(_slow_batches(WAITS, took))):
                run.log(step, batch=batch)
                run.end_step(step)
        assert run.close(10)
        rows = wait_for(lambda: (r := steps(root.api_address, f"loader-{pattern}", "dataloader_wait"))
                        and len(r) == len(WAITS) and r, what="every step's dataloader_wait")
        assert [r["step"] for r in rows] == list(range(len(WAITS)))
        assert all(r["count"] == 1 for r in rows), rows
        assert len(took) == len(WAITS) and all(t >= w for t, w in zip(took, WAITS)), took
        for row, wait in zip(rows, took):  # the batch's own wait, not the step before's: within 80 ms of it
            assert wait <= row["max"] < wait + 0.08, (row["step"], row["max"], wait, took)
        batches = steps(root.api_address, f"loader-{pattern}", "batch")
        assert [(r["step"], r["max"]) for r in batches] == [(s, float(s)) for s in range(len(WAITS))]
    finally:
        stop_all(agent)
