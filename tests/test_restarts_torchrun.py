"""Issue 17 item 4: real torchrun jobs that restart, resize and reuse torchrun's default run id `none`.

tests/restart_job.py under torchrun (gloo, CPU) against a real root and agent: the SDK takes the attempt from
torchrun's store by itself (telemetry.init() with no argument), and every launch and restart must reach the
root apart, with goodput figures equal to what the ranks' own clocks say.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors.root.goodput import AttemptSteps, compute
from helpers_tree import api_get, wait_for
from torchrun_tree import durable_ranks, root_and_agent, run_job

pytest.importorskip("torch")
import torch.distributed as dist

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available"),
]

JOB_SCRIPT = Path(__file__).with_name("restart_job.py")


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[dict]:
    with root_and_agent(tmp_path) as found:
        yield found


def _launch(tree: dict, world: int, steps: int, *args: str, restarts: int = 0, name: str = "run") -> None:
    """torchrun with the default run id (`none`), as a user who passes no --rdzv-id gets it."""
    out = run_job(world, JOB_SCRIPT, ["--steps", str(steps), "--checkpoint", str(tree["tmp"] / f"{name}.ckpt"),
                                      "--times", str(tree["tmp"] / "times.jsonl"), *args],
                  tree["agent"], "none", timeout=200, launcher=("--max-restarts", str(restarts)))
    assert durable_ranks(out) == world, out


def _rows(tree: dict, count: int) -> list[dict]:
    """Every attempt's `loss` rows, once `count` of them are at the root."""
    def enough() -> list[dict] | None:
        status, body = api_get(tree["api"], "/api/v1/jobs/none/steps?metric=loss&attempt=all&last=1000")
        assert status == 200, body
        return body["steps"] if len(body["steps"]) >= count else None
    return wait_for(enough, 30, what=f"{count} loss rows at the root")


def _timeline(tree: dict) -> list[tuple[int, float, int]]:
    status, body = api_get(tree["api"], "/api/v1/jobs/none/steps?metric=loss&last=1000")
    assert status == 200, body
    return [(row["step"], row["min"], row["count"]) for row in body["steps"]]


def test_a_restart_resumes_from_its_checkpoint_as_a_new_attempt(tree: dict) -> None:
    """Rank 1 dies entering step 7; torchrun restarts both ranks; they resume after the step-4 checkpoint.
    (More restarts are allowed than needed: an attempt that fails before its first step is not counted.)"""
    _launch(tree, 2, 12, "--fail-rank", "1", "--fail-step", "7", restarts=3)
    rows = _rows(tree, 6 + 8)
    attempts = sorted({row["attempt"] for row in rows})
    assert len(attempts) == 2 and attempts[0] > 0, attempts
    by_attempt = {a: [(r["step"], r["min"], r["count"]) for r in rows if r["attempt"] == a] for a in attempts}
    assert by_attempt[attempts[0]] == [(s, float(s), 2) for s in range(1, 7)]
    restart = int(by_attempt[attempts[1]][0][1] - 5) // 1000  # the restart count that ran (1 unless gloo failed)
    assert restart >= 1
    assert by_attempt[attempts[1]] == [(s, s + 1000.0 * restart, 2) for s in range(5, 13)]  # steps 5, 6 apart
    # The default view reads as one timeline: each step from the latest attempt that ran it.
    assert _timeline(tree) == [(s, float(s), 2) for s in range(1, 5)] + [(s, s + 1000.0 * restart, 2)
                                                                         for s in range(5, 13)]

    # Goodput against the ranks' own clocks: per attempt and step, when the last rank ended it.
    ends: dict[tuple[int, int], int] = {}
    for line in (tree["tmp"] / "times.jsonl").read_text().splitlines():
        restart, step, end = json.loads(line)
        ends[(restart, step)] = max(ends.get((restart, step), 0), end)
    truth = compute("none", [AttemptSteps(r, 2, sorted((s, t) for (rr, s), t in ends.items() if rr == r))
                             for r in (0, restart)])
    figures = api_get(tree["api"], "/api/v1/jobs/none/goodput")[1]
    assert [(a["world_size"], a["first_step"], a["last_step"], a["steps_replayed"]) for a in figures["attempts"]] == [
        (2, 1, 6, 0), (2, 5, 12, 2)]
    for name in ("wall_s", "productive_s", "lost_s", "restart_downtime_s", "replay_s", "goodput"):
        assert figures[name] == pytest.approx(truth[name], abs=0.05), (name, figures, truth)
    assert figures["restart_downtime_s"] > 0 and figures["lost_s"] > 0
    status, body = api_get(tree["api"], "/api/v1/jobs/none/events?kind=restart")
    [event] = body["events"]
    assert event["attempt"] == attempts[1] and event["detail"]["steps_replayed"] == 2


def test_a_resize_under_the_same_run_id_is_a_new_attempt(tree: dict) -> None:
    _launch(tree, 2, 4, name="small")
    _launch(tree, 3, 4, "--tag", "0.5", name="large")
    rows = _rows(tree, 8)
    figures = api_get(tree["api"], "/api/v1/jobs/none/goodput")[1]
    assert [(a["world_size"], a["first_step"], a["last_step"]) for a in figures["attempts"]] == [(2, 1, 4), (3, 1, 4)]
    assert sorted((r["step"], r["count"]) for r in rows) == sorted([(s, 2) for s in range(1, 5)] +
                                                                   [(s, 3) for s in range(1, 5)])
    assert _timeline(tree) == [(s, s + 0.5, 3) for s in range(1, 5)]


def test_two_launches_with_the_default_run_id_both_reach_the_root(tree: dict) -> None:
    _launch(tree, 2, 5, name="first")
    _launch(tree, 2, 5, "--tag", "0.25", name="second")
    rows = _rows(tree, 10)
    attempts = sorted({row["attempt"] for row in rows})
    assert len(attempts) == 2
    for attempt, tag in zip(attempts, (0.0, 0.25)):
        assert [(r["step"], r["min"], r["count"]) for r in rows if r["attempt"] == attempt] == [
            (s, s + tag, 2) for s in range(1, 6)]
    assert _timeline(tree) == [(s, s + 0.25, 2) for s in range(1, 6)]
