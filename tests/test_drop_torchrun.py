"""Issue 24 item 3 on real torchrun jobs (gloo, CPU, the README's lines only: tests/drop_job.py), at the root's
default detector settings: a rank 4x slower from step 20 drops the job's MFU by ~75 % (every rank waits for it)
and mfu_drop names it within a few steps (the 40-step rule before issue 24 could not within the job's 34); a
rank whose loader then takes a slowed step's length longer per batch is named by dataloader_stall at once; the
same job with neither raises neither.

The job's steps are PACE_S (0.15 s) of each rank's own work, not 0.04 s: the bound here (named within 5 steps of
the onset) is the rule's promise for a job whose MFU varies ~5 % step to step (bench/drop_rules.py, "typical":
a 75 % drop within 3 steps), and on this shared 2-core machine the host's scheduling jitter - tens of ms per step,
whatever the step's length - made a 0.04 s job's MFU vary 6-20 % (its low-side sigma, as mfu_drop measures it, at
load 12-30): the rule's "loaded" regime, where a 75 % drop is promised within 10 steps, and 2 of 8 runs at load
12-17 were named 6-9 steps after the onset (docs/detectors.md, 2026-11-27). The fault is the same 4x.
"""

from __future__ import annotations

import statistics
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers_tree import api_get, wait_for
from helpers_tree import steps as api_steps
from torchrun_tree import durable_ranks, root_and_agent, run_job

pytest.importorskip("torch")
import torch.distributed as dist

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available"),
]

JOB_SCRIPT = Path(__file__).with_name("drop_job.py")
WORLD, STEPS, FROM, LOADER_FROM = 2, 34, 20, 28
PACE_S = 0.15                  # every rank's own work per step (drop_job.py's --pace-s)
SLOW_S, LOADER_S = 3 * PACE_S, 4 * PACE_S  # the slow rank's extra work per step (4x), the slow loader's per batch


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    with root_and_agent(tmp_path_factory.mktemp("drop")) as found:
        yield found


def _job(tree: dict, *args: str) -> str:
    job = f"drop-{uuid.uuid4().hex[:8]}"
    out = run_job(WORLD, JOB_SCRIPT, ["--job", job, "--steps", str(STEPS), "--pace-s", str(PACE_S), *args],
                  tree["agent"], job, timeout=240,
                  launcher=("--rdzv-id", job, "--max-restarts", "0"))
    assert durable_ranks(out) == WORLD, out
    wait_for(lambda: len(api_steps(tree["api"], job, "mfu", last=10_000)) == STEPS or None, timeout=30,
             what=f"mfu: {STEPS} steps at the root")
    return job


def _events(tree: dict, job: str, kind: str) -> list[dict]:
    status, body = api_get(tree["api"], f"/api/v1/jobs/{job}/events?kind={kind}&last=1000")
    assert status == 200, body
    return body.get("events", [])


def test_a_slow_rank_and_then_a_slow_loader_are_named_within_a_few_steps(tree: dict) -> None:
    """One job, two faults (a job per fault cost CI ~35 s each here): rank 1 computes 4x longer from step FROM (MFU
    falls ~75 %: mfu_drop), and from batch LOADER_FROM rank 0's loader takes LOADER_S longer (dataloader_stall,
    naming rank 0, though the MFU drop is already open)."""
    job = _job(tree, "--slow-rank", "1", "--slow-from", str(FROM), "--slow-s", str(SLOW_S), "--loader-rank", "0",
               "--loader-from", str(LOADER_FROM), "--loader-s", str(LOADER_S))
    mfu = {r["step"]: r["mean"] for r in api_steps(tree["api"], job, "mfu", last=10_000)}
    print({s: round(v, 4) for s, v in mfu.items()})
    (event,) = wait_for(lambda: _events(tree, job, "mfu_drop") or None, timeout=20, what="an mfu_drop event")
    print(event["step"], event["detail"])
    assert FROM - 1 <= event["step"] <= FROM + 2 and event["detail"]["detected_step"] <= FROM + 5, event
    # (its detail is the latest update's: once rank 0 waits on its loader, rank 1's slowness hides in part)
    assert event["detail"]["relative_drop"] > 0.3 and event["detail"]["rule"] == "cusum", event
    usual = statistics.median(mfu[s] for s in range(5, FROM))  # (one step before the onset may be a dip)
    assert all(mfu[s] < 0.5 * usual for s in range(FROM, LOADER_FROM)), "the fault is what it says"
    events = wait_for(lambda: _events(tree, job, "dataloader_stall") or None, timeout=20,
                      what="a dataloader_stall event")
    event = events[0]
    assert event["ranks"][0] == 0, event
    # the wait before batch s is logged as step s - 1 (the README's loop: the loader runs before run.step)
    assert LOADER_FROM - 2 <= event["step"] <= LOADER_FROM + 1, event
    assert event["detail"]["detected_step"] <= LOADER_FROM + 3, event


def test_the_same_job_with_neither_raises_neither(tree: dict) -> None:
    job = _job(tree)
    assert _events(tree, job, "mfu_drop") == [] and _events(tree, job, "dataloader_stall") == []
