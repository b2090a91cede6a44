"""End to end: examples/train_ddp.py under torchrun (gloo, loopback only) -> a real agent -> a real root.

Starts `telemetry collector` (the root) and `telemetry agent` as processes, runs the example
with a NaN on one rank, a loss-spiking batch and a slow rank, then checks what the root
finalised: complete steps, NaN localised to its rank, the straggler named, collective progress
in the heartbeats.
"""

from __future__ import annotations

import sqlite3
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.detection_jobs.logs import done_in
from collectors.common.attempts import like_prefix
from collectors.demo.train import run as run_torchrun
from collectors.sim.procs import free_port
from helpers_tree import steps as api_steps
from helpers_tree import wait_for
from torchrun_tree import root_and_agent

pytest.importorskip("torch")
import torch.distributed as dist

pytestmark = [
    pytest.mark.timeout(240),  # ~10-25 s each on an idle 2-core machine; generous for a loaded one
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available"),
]

STEPS = 80
NAN_STEP = 12
BAD_STEP = 40
SLOW_FROM = 25
SLOW_FACTOR = 4.0
PEAK = 1e13  # a made-up CPU peak, so that mfu is logged
LINGER_S = 2.5  # > 2 heartbeats after the last step


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """One root and agent for the file's torchrun jobs (each has a job name of its own)."""
    with root_and_agent(tmp_path_factory.mktemp("train_ddp")) as found:
        yield found


def _torchrun(world: int, job: str, agent: str, *extra: str, timeout: float = 150) -> subprocess.CompletedProcess:
    done, timed_out = run_torchrun(world, job, agent, *extra, timeout=timeout)
    if timed_out:
        raise AssertionError(f"torchrun did not finish in {timeout} s:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    return done


def _by_step(api: str, job: str, metric: str, world: int) -> dict[int, dict]:
    def complete() -> dict[int, dict] | None:
        rows = {row["step"]: row for row in api_steps(api, job, metric, last=10_000)}
        if not set(rows) >= set(range(STEPS)):
            return None
        if any(rows[s]["count"] + rows[s]["nonfinite_count"] < world for s in range(STEPS)):
            return None  # a late delta (a rank descheduled past the agent's deadline) not merged yet
        return rows

    return wait_for(complete, timeout=30, what=f"{metric}: steps 0..{STEPS - 1} complete at the root")


def _time_windows(db: Path, job: str, metric: str) -> list[sqlite3.Row]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    con.row_factory = sqlite3.Row
    try:
        # the job's windows are stored under its attempt-scoped name (job@attempt) when it has an attempt
        return con.execute("SELECT idx, count, min, max FROM windows WHERE (job=? OR substr(job, 1, ?)=?) "
                           "AND metric=? AND width_ms>0 ORDER BY idx",
                           (job, len(job) + 1, like_prefix(job), metric)).fetchall()
    finally:
        con.close()


def _per_rank(rows: dict[int, dict], steps: range, world: int) -> dict[int, float]:
    """Each rank's median over `steps`, from the summaries' top-k (k = 8 >= world: every rank is in it)."""
    values: dict[int, list[float]] = {r: [] for r in range(world)}
    for step in steps:
        top = rows[step]["top"]
        assert len(top) == world, rows[step]
        for value, rank in top:
            values[rank].append(value)
    return {r: statistics.median(v) for r, v in values.items()}


@pytest.mark.parametrize("world,nan_rank,slow_rank", [(2, 1, 0), (4, 2, 3)])
def test_torchrun_example_reaches_the_root(tree: dict, world: int, nan_rank: int, slow_rank: int) -> None:
    job = f"ddp-{world}-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    result = _torchrun(world, job, tree["agent"], "--steps", str(STEPS), "--nan-step", str(NAN_STEP),
                       "--nan-rank", str(nan_rank), "--bad-batch-step", str(BAD_STEP),
                       "--slow-rank", str(slow_rank), "--slow-factor", str(SLOW_FACTOR),
                       "--slow-from", str(SLOW_FROM), "--peak-flops", str(PEAK), "--linger", str(LINGER_S))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    done = done_in(result.stdout)  # two ranks' prints can share a line of torchrun's output
    assert sorted(d["rank"] for d in done) == list(range(world))
    assert all(d["durable"] is True and d["stats"]["dropped_values"] == 0 for d in done), done
    print(f"torchrun with {world} ranks: {time.monotonic() - started:.1f} s")

    api, everyone = tree["api"], list(range(world))
    metrics = {m: _by_step(api, job, m, world) for m in
               ("step_time", "loss", "grad_norm", "dataloader_wait", "mfu", "compute_time", "sync_wait")}

    # Every step is complete: each rank contributed exactly one value to every metric.
    for metric, rows in metrics.items():
        for step in range(STEPS):
            row = rows[step]
            assert row["missing"] == [] and row["expected"] == world, (metric, row)
            assert row["count"] + row["nonfinite_count"] == world, (metric, row)
            nan_here = step == NAN_STEP and metric in ("loss", "grad_norm")
            if not nan_here:
                assert row["count"] == world and row["nonfinite_sources"] == [], (metric, row)

    # NaN: the loss names its rank; DDP's all-reduce spreads the NaN gradient to every rank.
    assert metrics["loss"][NAN_STEP]["nonfinite_sources"] == [nan_rank]
    assert metrics["loss"][NAN_STEP]["count"] == world - 1
    assert metrics["grad_norm"][NAN_STEP]["nonfinite_sources"] == everyone
    # ...and the skipped update kept the model healthy: it went on learning.
    loss = {s: r["mean"] for s, r in metrics["loss"].items()}
    assert all(loss[s] is not None for s in range(NAN_STEP + 1, STEPS))
    assert loss[STEPS - 1] < 0.85 * loss[0], loss

    # The bad batch spikes the loss against the steps before it.
    assert loss[BAD_STEP] > 1.3 * max(loss[s] for s in range(BAD_STEP - 5, BAD_STEP)), loss

    # The straggler. Under synchronous DDP every rank's *wall* step time converges to the slow
    # rank's (the others wait for it in the gradient all-reduce), so step_time cannot say who is
    # slow. The rank's own work (compute_time = step_time - time blocked in the all-reduce) can,
    # and the slow rank is the one that does not wait (sync_wait). Medians per rank over the slow
    # steps, so that a rank descheduled now and then on a loaded machine does not decide it.
    slow = range(SLOW_FROM + 1, STEPS)
    compute = _per_rank(metrics["compute_time"], slow, world)
    waits = _per_rank(metrics["sync_wait"], slow, world)
    steps_ = _per_rank(metrics["step_time"], slow, world)
    others = [r for r in everyone if r != slow_rank]
    assert compute[slow_rank] > 1.8 * max(compute[r] for r in others), compute
    assert waits[slow_rank] < min(waits[r] for r in others), waits
    argmax = [metrics["compute_time"][s]["argmax"] for s in slow]
    assert argmax.count(slow_rank) > len(argmax) / 2, argmax
    # Everybody's wall step takes about as long as the slow rank's own work: the job waits for it.
    assert min(steps_.values()) > 0.8 * compute[slow_rank], (steps_, compute)

    # MFU is logged on every rank once a peak is known.
    assert all(0 < metrics["mfu"][s]["min"] <= metrics["mfu"][s]["max"] < 1 for s in range(STEPS))

    # Heartbeats carry the default group's collective progress (1 s time-bucket windows). The
    # example lingers after its last step, so the last windows hold the final figures: at least
    # one gradient all-reduce per step, all of them completed, on every rank. Time windows are
    # closed by the agent after their second and a grace, so the lingering seconds' windows reach
    # the root's store after the ranks have exited (close() covers step records, not heartbeats):
    # wait for them, bounded.
    def final_windows() -> tuple[list[sqlite3.Row], list[sqlite3.Row]] | None:
        enq = _time_windows(tree["db"], job, "collective.last_enqueued")
        comp = _time_windows(tree["db"], job, "collective.last_completed")
        if not enq or not comp:
            return None
        final = max(r["max"] for r in enq)
        both = all(any(r["count"] == world and r["min"] == final for r in rows) for rows in (enq, comp))
        return (enq, comp) if both else None

    try:
        enq, comp = wait_for(final_windows, timeout=20, interval=0.25, what="the lingering heartbeats' windows")
    except AssertionError:
        enq = _time_windows(tree["db"], job, "collective.last_enqueued")
        comp = _time_windows(tree["db"], job, "collective.last_completed")
        raise AssertionError(([dict(r) for r in enq], [dict(r) for r in comp])) from None
    final_enq = max(r["max"] for r in enq)
    assert final_enq >= STEPS
    assert max(r["max"] for r in comp) == final_enq


# ---------------------------------------------------------------- telemetry.torch.integration, in process


def test_attach_degrades_quietly_and_attaches_once() -> None:
    from types import SimpleNamespace

    from telemetry.torch.integration import attach, detach

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    run = SimpleNamespace(heartbeat_extras=[])
    assert attach(run) is None and run.heartbeat_extras == []  # not initialised: nothing attached
    reader = attach(run, require_initialized=False)
    assert reader is not None and run.heartbeat_extras == [reader.read]
    assert reader.read() is None  # and it reads nothing until a process group exists
    assert attach(run, require_initialized=False) is reader and len(run.heartbeat_extras) == 1
    assert detach(run) and run.heartbeat_extras == [] and not detach(run)


_REAL_GROUP_CHECK = """
import os, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from types import SimpleNamespace
from telemetry.torch.integration import SyncWaitClock, attach

assert SyncWaitClock.install(torch.nn.Linear(2, 2)) is None  # not DDP: nothing to hook
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[1], rank=0, world_size=1)
run = SimpleNamespace(heartbeat_extras=[])
reader = attach(run)
assert reader is not None and run.heartbeat_extras == [reader.read]
model = DDP(torch.nn.Linear(4, 1))
clock = SyncWaitClock.install(model)
assert clock is not None and clock.wait_since_ready(time.perf_counter()) == 0.0
for _ in range(3):
    model(torch.ones(2, 4)).sum().backward()
    wait = clock.wait_since_ready(time.perf_counter())
    assert 0.0 <= wait < 5.0, wait
assert clock.buckets == 3, clock.buckets
deadline = time.monotonic() + 5
figures = None
while time.monotonic() < deadline and not figures:
    figures = run.heartbeat_extras[0]()
    time.sleep(0.05)
assert figures, "no collective progress"
assert figures["collective.last_enqueued"] >= 3, figures  # DDP's init broadcast + 3 all-reduces
assert figures["collective.last_completed"] <= figures["collective.last_enqueued"], figures
print("ok", flush=True)
os._exit(0)  # no teardown: see the test's docstring
"""


def test_attach_and_sync_wait_clock_with_a_real_group() -> None:
    """In a process of its own: tearing a DDP model with a Python comm hook down can deadlock inside torch
    (seen in a CI run: the main thread, holding the GIL, deallocates the Reducer and joins gloo's worker in
    ~ProcessGroupGloo while that worker waits for the GIL to dispose of the hook's Python callback). A
    training process exits without that teardown; this check does too (os._exit), bounded by a timeout."""
    done = subprocess.run([sys.executable, "-c", _REAL_GROUP_CHECK, str(free_port())], capture_output=True,
                          text=True, timeout=120, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr[-3000:]
