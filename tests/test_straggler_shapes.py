"""Issue 24: a straggler named in the shapes real jobs have, on real torchrun jobs (gloo, CPU).

Every shape family of bench/detection_jobs/shapes.py (the README's lines only): DDP with several buckets and
the loss all-reduced for logging, FSDP2 with gradient clipping, two synchronous all-reduces, gradient
accumulation under no_sync, and a tensor-parallel subgroup (three process groups), on 4 ranks. In each one
rank is made 2x slower from step 14 (small batches: a CI-sized job), in another place of its step per shape
(forward, backward, optimizer, data). The root must name exactly that rank, from the SDK's `collective_wait`,
within a few steps. The full matrix (every shape x place x 1.1-2x, and clean runs) is bench/detection.py
--matrix; these are its smallest cells, so that a change that breaks a shape fails here.

The five shapes run one after another in one torchrun job (shapes.py --shape ddp,fsdp2,...: each its own
telemetry job, JOB-SHAPE), so the suite pays for one launch (torch imported on every rank, rendezvous, close)
instead of five: ~70 s here under load instead of 230. Each shape is still judged alone (its own test).
"""

from __future__ import annotations

import json
import statistics
import uuid
from collections.abc import Iterator

import pytest

from helpers_tree import all_steps, api_get, wait_for
from helpers_tree import steps as api_steps
from torchrun_tree import REPO, durable_ranks, root_and_agent, run_job

pytest.importorskip("torch")
import torch.distributed as dist

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available"),
]

SCRIPT = REPO / "bench" / "detection_jobs" / "shapes.py"
STEPS, FAULT_STEP, WORLD = 26, 14, 4
# shape, where the slowness is, the slow rank
CASES = [("ddp", "forward", 1), ("fsdp2", "backward", 2), ("sync2", "optimizer", 0), ("accum", "data", 1),
         ("tp", "backward", 3)]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    with root_and_agent(tmp_path_factory.mktemp("shapes")) as found:
        yield found


@pytest.fixture(scope="module")
def shapes_job(tree: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The one torchrun job running every case; its truth lines by shape."""
    job = f"shape-{uuid.uuid4().hex[:6]}"
    truth = tmp_path_factory.mktemp("truth") / "truth.jsonl"
    out = run_job(WORLD, SCRIPT, ["--job", job, "--shape", ",".join(c[0] for c in CASES),
                                  "--where", ",".join(c[1] for c in CASES),
                                  "--fault-rank", ",".join(str(c[2]) for c in CASES),
                                  "--steps", str(STEPS), "--fault-step", str(FAULT_STEP), "--factor", "2",
                                  "--batch", "128", "--truth", str(truth)],
                  tree["agent"], job, timeout=400, launcher=("--rdzv-id", job, "--max-restarts", "0"))
    truths = {t["shape"]: t for t in map(json.loads, truth.read_text().splitlines())}
    return {"job": job, "out": out, "truths": truths}


def test_every_shape_ran_to_the_end_durably(shapes_job: dict) -> None:
    assert durable_ranks(shapes_job["out"]) == WORLD * len(CASES), shapes_job["out"][-3000:]
    assert {shape: t["rank"] for shape, t in shapes_job["truths"].items()} == {c[0]: c[2] for c in CASES}


def test_every_rank_logs_its_run_queue_wait_each_step(tree: dict, shapes_job: dict) -> None:
    """The SDK logs `runqueue_wait` and `oncpu_time` beside `collective_wait` (telemetry/sdk/runqueue.py): every rank, every step,
    in every shape. The injected slowness is a sleep (blocked, not runnable): over the steps after the fault the
    slow rank's run-queue wait lies, in the median, less than half its sleep above the median rank's (the
    straggler rule discounts only a lead that excess run-queue wait explains)."""
    for shape, _, slow in CASES:
        job = f"{shapes_job['job']}-{shape}"

        rows = list(all_steps(tree["api"], job, "runqueue_wait", STEPS).values())
        assert all(r["count"] == WORLD and r["min"] >= 0.0 for r in rows), (shape, rows)
        excess = [next(v for v, rank in r["top"] if rank == slow) - r["p50"] for r in rows if r["step"] > FAULT_STEP]
        assert statistics.median(excess) < shapes_job["truths"][shape]["extra_s"] / 2, (shape, excess)
        # ... and its step thread's time on a CPU (`oncpu_time`, the same read): the sleep adds none of it (the rule
        # does not take its queueing for its own CPU work: collectors/detectors/cpu_work.py)

        cpu = list(all_steps(tree["api"], job, "oncpu_time", STEPS).values())
        assert all(r["count"] == WORLD and r["min"] > 0.0 for r in cpu), (shape, cpu)
        extra = [next(v for v, rank in r["top"] if rank == slow) - r["p50"] for r in cpu if r["step"] > FAULT_STEP]
        assert statistics.median(extra) < shapes_job["truths"][shape]["extra_s"] / 4, (shape, extra)


@pytest.mark.parametrize(("shape", "where", "slow"), CASES, ids=[c[0] for c in CASES])
def test_slow_rank_is_named_in_each_shape(tree: dict, shapes_job: dict, shape: str, where: str, slow: int) -> None:
    job, world = f"{shapes_job['job']}-{shape}", WORLD
    assert shapes_job["truths"][shape]["where"] == where

    waits = list(all_steps(tree["api"], job, "collective_wait", STEPS).values())
    assert all(r["count"] == world for r in waits), waits
    late = [r for r in waits if r["step"] > FAULT_STEP]
    # The slow rank is the one that waits least, on most steps after the fault (a wrong signal: ~1 in 4).
    assert sum(r["argmin"] == slow for r in late) >= 2 * len(late) / 3, [(r["step"], r["argmin"]) for r in waits]

    def events() -> list[dict] | None:
        status, body = api_get(tree["api"], f"/api/v1/jobs/{job}/events?kind=straggler&last=100")
        assert status == 200, body
        return body["events"] or None
    try:
        found = wait_for(events, timeout=20, what="a straggler event")
    except AssertionError as exc:  # none at all: what the root judged says why
        raise AssertionError(f"{exc}\n{judged(tree, job, [])}") from None
    # Named exactly, within a few steps of the onset (2x: 3 steps by the bound; a few more when the loaded
    # machine meddles), by an event that stays open to the job's end. (An event before the fault is the machine's
    # own noise on a loaded host: counted as a false alarm by bench/detection.py --matrix, not judged here.)
    after = [e for e in found if e["ranks"] == [slow] and e["last_step"] >= STEPS - 3
             and e["detail"]["signal"] in ("collective_wait", "collective_wait_share_ewma")]
    assert after, judged(tree, job, found)
    event = after[0]
    named_at = max(event["detail"]["detected_step"], event["step"])
    assert named_at <= FAULT_STEP + 6, judged(tree, job, found)
    assert all(e["ranks"] == [slow] for e in found if e["detail"]["detected_step"] >= FAULT_STEP), \
        judged(tree, job, found)


def judged(tree: dict, job: str, found: list[dict]) -> str:
    """What the root judged, for a failing assertion to explain itself: every straggler event's detail (and the
    job's cpu_starved events: a rank they name is left to them), and per
    step the figures the rule read (collective_wait p50 / min / argmin, step_time p50 and max, run-queue wait p50
    and top-k by rank)."""
    rows = {metric: {r["step"]: r for r in api_steps(tree["api"], job, metric, last=10_000)}
            for metric in ("collective_wait", "step_time", "runqueue_wait")}
    lines = [f"events of {job}:"]
    lines += [f"  step {e['step']} .. {e['last_step']} ranks {e['ranks']}: {json.dumps(e['detail'])}" for e in found]
    _, starved = api_get(tree["api"], f"/api/v1/jobs/{job}/events?kind=cpu_starved&last=100")
    lines += [f"  cpu_starved step {e['step']} .. {e['last_step']} ranks {e['ranks']}"
              for e in (starved or {}).get("events", [])]
    lines.append("  step  wait p50      min argmin | step p50      max | runq p50 top")
    for step in sorted(rows["collective_wait"]):
        w, t, q = (rows[m].get(step, {}) for m in ("collective_wait", "step_time", "runqueue_wait"))
        lines.append(f"  {step:4d} {_f(w.get('p50'))} {_f(w.get('min'))} {w.get('argmin')!s:>6} | "
                     f"{_f(t.get('p50'))} {_f(t.get('max'))} | {_f(q.get('p50'))} {q.get('top')}")
    return "\n".join(lines)


def _f(value: float | None) -> str:
    return f"{value:8.4f}" if isinstance(value, (int, float)) else f"{value!s:>8}"
