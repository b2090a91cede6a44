"""Issue 12 item 1: a straggler named with nothing but telemetry.init() and run.step, on a real torchrun job.

3 ranks on gloo (tests/straggler_job.py, a DDP MLP), one of them 0.3 s slower per step from step 10:
every rank's step_time grows alike under the synchronous all-reduce, and the root's straggler event
must still name the slow rank, from what the SDK logs by itself (`collective_wait` since issue 24; the
`collective_arrival` it also logs still shows the slow rank last), with the wait it costs.
The same job without the slow rank must raise no straggler event.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers_tree import all_steps, api_get, wait_for
from torchrun_tree import durable_ranks, root_and_agent, run_job

pytest.importorskip("torch")
import torch.distributed as dist

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available"),
]

JOB_SCRIPT = Path(__file__).with_name("straggler_job.py")
WORLD, STEPS, SLOW_RANK, SLOW_FROM, SLOW_S = 3, 30, 1, 10, 0.3


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[dict]:
    with root_and_agent(tmp_path) as found:
        yield found


def _job(tree: dict, job: str, *args: str) -> None:
    out = run_job(WORLD, JOB_SCRIPT, ["--job", job, "--steps", str(STEPS), *args], tree["agent"], job, timeout=240,
                  launcher=("--rdzv-id", job, "--max-restarts", "0"))
    assert durable_ranks(out) == WORLD, out


def _all_steps(tree: dict, job: str, metric: str) -> dict[int, dict]:
    return all_steps(tree["api"], job, metric, STEPS)


def _events(tree: dict, job: str) -> list[dict]:
    status, body = api_get(tree["api"], f"/api/v1/jobs/{job}/events?kind=straggler&last=1000")
    assert status == 200, body
    return body.get("events", [])


@pytest.mark.parametrize("where", ["forward", "after-update"])
def test_slow_rank_is_named_with_its_wait(tree: dict, where: str) -> None:
    """Slow before the step's last collective (its forward) or after it (its update): both are the rank's
    own work between two synchronisations, and both make the others wait."""
    job = f"strag-{uuid.uuid4().hex[:8]}"
    _job(tree, job, "--slow-rank", str(SLOW_RANK), "--slow-from", str(SLOW_FROM), "--slow-s", str(SLOW_S),
         "--slow-where", where)
    arrivals = _all_steps(tree, job, "collective_arrival")
    step_times = _all_steps(tree, job, "step_time")
    # The failing case of the issue: step_time alone does not single the rank out (max/p50 stays ~1).
    late = [s for s in range(SLOW_FROM + 1, STEPS)]
    assert sum(step_times[s]["max"] / step_times[s]["p50"] < 1.5 for s in late) >= len(late) - 2
    # Every rank logged collective_arrival on every step; the slow rank arrives last on the slow steps.
    print({s: (round(r["p50"], 3), round(r["max"], 3), r["argmax"]) for s, r in arrivals.items()})
    assert all(arrivals[s]["count"] == WORLD for s in range(STEPS))
    assert sum(arrivals[s]["argmax"] == SLOW_RANK for s in late) >= len(late) - 2
    events = wait_for(lambda: _events(tree, job) or None, timeout=20, what="a straggler event")
    assert len(events) == 1, events
    event = events[0]
    assert event["ranks"] == [SLOW_RANK], event
    # Judged on collective_wait (issue 24): the slow rank waits least, the others ~0.3 s a step longer. A rank
    # ~5x slower: named within the 2x bound (3 steps), or a step or two later when the scheduler meddles.
    # (its detail is the latest update's: the per-step waits or the agents' running shares of them)
    assert event["detail"]["signal"] in ("collective_wait", "collective_wait_share_ewma"), event
    assert SLOW_FROM <= event["detail"]["detected_step"] <= SLOW_FROM + 5, event
    assert 0.2 < event["detail"]["wait_s_total"] / event["detail"]["steps"] < 0.6, event


def test_clean_job_raises_no_straggler_event(tree: dict) -> None:
    job = f"clean-{uuid.uuid4().hex[:8]}"
    _job(tree, job)
    arrivals = _all_steps(tree, job, "collective_arrival")
    assert all(arrivals[s]["count"] == WORLD for s in range(STEPS))
    _all_steps(tree, job, "step_time")
    assert _events(tree, job) == []
