"""A straggler of a two-rank job named within the issue's bound, on a real torchrun job (issue 24).

2 ranks on gloo (tests/straggler_job.py: a DDP MLP, the README's lines only), rank 1 2x slower from step 20 (it
sleeps its step's own work, `--pace-s`, a second time before its forward). With two ranks the median of the waits
is their mean: measured against it, the slow rank's lead was half its lead over its peer and a 2x rank was named
5-7 steps after its onset in the model (bench/detection_jobs/cpu_work.py --world 2; bound 3). Each rank's lead is
now taken over the other rank's wait (collectors/detectors/straggler.py, peer_median). The same job without the
slow rank raises no straggler event.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers_tree import all_steps, events, wait_for
from torchrun_tree import durable_ranks, root_and_agent, run_job

pytest.importorskip("torch")
import torch.distributed as dist

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available"),
]

JOB_SCRIPT = Path(__file__).with_name("straggler_job.py")
WORLD, STEPS, SLOW_RANK, SLOW_FROM, PACE_S = 2, 34, 1, 20, 0.1
BOUND = 3  # the bound on a 2x rank: steps from its onset


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """One root and agent for both jobs (each its own job id): one tree's start-up less."""
    with root_and_agent(tmp_path_factory.mktemp("tree")) as found:
        yield found


def _job(tree: dict, job: str, *args: str) -> None:
    out = run_job(WORLD, JOB_SCRIPT, ["--job", job, "--steps", str(STEPS), "--pace-s", str(PACE_S), *args],
                  tree["agent"], job, timeout=240, launcher=("--rdzv-id", job, "--max-restarts", "0"))
    assert durable_ranks(out) == WORLD, out


def _waits(tree: dict, job: str) -> dict[int, dict]:
    return all_steps(tree["api"], job, "collective_wait", STEPS)


def _events(tree: dict, job: str) -> list[dict]:
    return events(tree["api"], job, "straggler")


def test_a_2x_rank_of_two_is_named_within_the_bound(tree: dict) -> None:
    job = f"strag2-{uuid.uuid4().hex[:8]}"
    _job(tree, job, "--slow-rank", str(SLOW_RANK), "--slow-from", str(SLOW_FROM), "--slow-s", str(PACE_S))
    waits = _waits(tree, job)
    print({s: (round(r["min"], 3), round(r["max"], 3), r["argmin"]) for s, r in waits.items()})
    assert all(waits[s]["count"] == WORLD for s in range(STEPS))
    events = wait_for(lambda: _events(tree, job) or None, timeout=20, what="a straggler event")
    assert all(e["ranks"] == [SLOW_RANK] for e in events), events
    first = events[0]["detail"]
    assert SLOW_FROM <= first["detected_step"] <= SLOW_FROM + BOUND, (first["detected_step"], first)


def test_a_clean_job_of_two_raises_no_straggler_event(tree: dict) -> None:
    """A smoke check of the clean side live (its 34 steps): the false alarms the two-rank persistence rules guard
    against came at step 101 and later in the model (review), which tests/test_straggler_cpu_work.py's
    test_a_clean_small_job_raises_no_straggler catches (300 steps); this one says a real job raises nothing early."""
    job = f"clean2-{uuid.uuid4().hex[:8]}"
    _job(tree, job)
    assert all(r["count"] == WORLD for r in _waits(tree, job).values())
    assert _events(tree, job) == []
