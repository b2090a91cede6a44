"""cpu_starved on a real torchrun job: a neighbour (busy processes pinned to the rank's CPU) starves one rank.

3 CPU ranks on gloo (tests/cpu_starved_job.py), each needing the same CPU time per step; from step 10 rank 1
shares its CPU with three busy processes. The root's `cpu_starved` warning must name rank 1, and only it, from
the `runqueue_wait` the SDK logs by itself. (A clean job raising none is shown on the model and on the recorded
clean runs: tests/test_cpu_starved.py, bench/cpu_starved_replay.py; on this shared 2-core machine a clean job's
rank is sometimes starved for real by other work, so a live clean run is not a fixed answer.)
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers_tree import api_get, wait_for
from torchrun_tree import durable_ranks, root_and_agent, run_job

pytest.importorskip("torch")
import torch.distributed as dist

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available"),
    pytest.mark.skipif(not sys.platform.startswith("linux") or not os.path.exists("/proc/thread-self/schedstat"),
                       reason="runqueue_wait needs Linux schedstats"),
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: every rank is starved alike"),
]

JOB_SCRIPT = Path(__file__).with_name("cpu_starved_job.py")
WORLD, STEPS, STARVED, FROM = 3, 40, 1, 10


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[dict]:
    with root_and_agent(tmp_path) as found:
        yield found


def test_a_rank_starved_by_its_neighbours_is_named(tree: dict, tmp_path: Path) -> None:
    job = f"starved-{uuid.uuid4().hex[:8]}"
    truth = tmp_path / "truth.json"
    out = run_job(WORLD, JOB_SCRIPT, ["--job", job, "--steps", str(STEPS), "--starved-rank", str(STARVED),
                                      "--starve-from", str(FROM), "--truth", str(truth)], tree["agent"], job,
                  timeout=240, launcher=("--rdzv-id", job, "--max-restarts", "0"))
    assert durable_ranks(out) == WORLD, out
    came = json.loads(truth.read_text())

    def raised() -> list[dict] | None:
        status, body = api_get(tree["api"], f"/api/v1/jobs/{job}/events?kind=cpu_starved&last=100")
        assert status == 200, body
        return body.get("events") or None

    def figures() -> list:
        _, rows = api_get(tree["api"], f"/api/v1/jobs/{job}/steps?metric=runqueue_wait&last=100")
        _, times = api_get(tree["api"], f"/api/v1/jobs/{job}/steps?metric=step_time&last=100")
        p50 = {r["step"]: r.get("p50") for r in times.get("steps", [])}
        return [(r["step"], p50.get(r["step"]), r["top"]) for r in rows.get("steps", [])]

    try:
        events = wait_for(raised, timeout=30, what="a cpu_starved event")
    except AssertionError as exc:  # a failing run explains itself: each step's step_time p50 and run-queue top-k
        raise AssertionError(f"{exc}; neighbours came {came}; (step, step_time p50, runqueue_wait top): "
                             f"{figures()}") from exc
    table = figures()
    assert [e["ranks"] for e in events] == [[STARVED]], (events, table)
    (event,) = events
    assert event["severity"] == "warning" and event["hosts"], event
    # raised after the neighbours came (its `step` is the first starved step in the rank's window: this loaded
    # machine may have kept the rank off a CPU a step or two before they came, so the time is what is asserted)
    assert event["time"] > came["time"] and event["detail"]["ranks"][0]["queued_share"] > 0.4, (event, came, table)
