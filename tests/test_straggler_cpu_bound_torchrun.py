"""Issue 24: a CPU-bound straggler on a loaded host, on a real torchrun job (gloo, CPU), is named.

On a host where every runnable thread gets 1 / L of a CPU a thread queues (L - 1) x its CPU time, so a rank that
does twice its peers' CPU work queues (L - 1) / L of its lead more than they do: from L = 5 the straggler rule on
the run-queue waits alone took it for a descheduled rank (and cpu_starved for a starved one) and named nothing
(docs/detectors.md, "CPU work is not descheduling"; the model: tests/test_straggler_cpu_work.py). The SDK's
`oncpu_time` (the step thread's time on a CPU, from the same schedstat read as `runqueue_wait`) tells its own
work from a neighbour's: here the host is loaded to >= 5 runnable threads per CPU by spinning processes, and one
rank of a data-parallel job (bench/detection_jobs/shapes.py sync2, the README's lines only) does 2x its CPU work
per step from step 20 (`--slowness cpu`: it spins on its own CPU time). The root must name exactly that rank,
within a few steps, from its `collective_wait`.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from bench.torchrun_jobs import job_env, torchrun_argv
from collectors.demo.train import kill_job
from helpers_tree import all_steps, api_get, wait_for
from helpers_tree import steps as api_steps
from torchrun_tree import REPO, durable_ranks, root_and_agent

pytest.importorskip("torch")
import torch.distributed as dist

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available"),
    pytest.mark.skipif(not os.path.exists("/proc/thread-self/schedstat"), reason="no schedstat: no oncpu_time"),
]

SCRIPT = REPO / "bench" / "detection_jobs" / "shapes.py"
STEPS, FAULT_STEP, WORLD, SLOW = 40, 20, 3, 1  # 20 slow steps (named 1-6 steps after the onset here)
PER_CPU = 5  # runnable threads per CPU the host is loaded to


def _spin(parent: int) -> None:
    """One runnable thread, in a session of its own. With the kernel's autogroup scheduling (Linux's
    sched_autogroup_enabled, on by default) CFS shares the CPUs between sessions first, and torchrun starts each
    rank in a session of its own (start_new_session): spinners left in pytest's session would weigh as one
    thread together, and the ranks would see ~2 runnable threads per CPU, not PER_CPU
    (test_the_ranks_see_the_load_the_spinners_make). Out of pytest's process group, it ends when pytest does
    (its parent gone), however pytest ends."""
    os.setsid()
    while os.getppid() == parent:
        for _ in range(100_000):
            pass


@pytest.fixture(scope="module")
def loaded_job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The tree and the job; once the root has the job's first step (torch imported on every rank: the spinners
    would slow that start-up, not the steps), spinners load the host to PER_CPU runnable threads per CPU with the
    job's ranks, from well before the fault (step FAULT_STEP) to the job's end."""
    cpus = len(os.sched_getaffinity(0))
    spinners = [multiprocessing.get_context("fork").Process(target=_spin, args=(os.getpid(),), daemon=True)
                for _ in range(max(1, PER_CPU * cpus - WORLD))]
    with root_and_agent(tmp_path_factory.mktemp("cpu_bound")) as tree:
        job = f"cpu-{uuid.uuid4().hex[:6]}"
        truth = tmp_path_factory.mktemp("truth") / "truth.jsonl"
        args = ["--job", job, "--shape", "sync2", "--where", "forward", "--fault-rank", str(SLOW), "--steps",
                str(STEPS), "--fault-step", str(FAULT_STEP), "--factor", "2", "--slowness", "cpu", "--truth", str(truth)]
        proc = subprocess.Popen(torchrun_argv(WORLD, SCRIPT, args, ("--rdzv-id", job, "--max-restarts", "0")),
                                env=job_env(tree["agent"]), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        try:
            wait_for(lambda: api_steps(tree["api"], job, "step_time") or proc.poll() is not None, timeout=300,
                     what="the job's first step at the root")
            loaded_from = max((r["step"] for r in api_steps(tree["api"], job, "step_time")), default=-1)
            for spinner in spinners:
                spinner.start()
            out, err = proc.communicate(timeout=300)
        except (subprocess.TimeoutExpired, AssertionError):
            kill_job(proc, job)
            out, err = proc.communicate(timeout=10)
            raise AssertionError(f"job timed out\n{out[-3000:]}\n{err[-4000:]}") from None
        finally:
            for spinner in spinners:
                if spinner.pid is not None:
                    spinner.terminate()
            for spinner in spinners:
                if spinner.pid is not None:
                    spinner.join(10)
        assert proc.returncode == 0, f"job failed ({proc.returncode})\n{out[-3000:]}\n{err[-4000:]}"
        yield {"tree": tree, "job": job, "out": out, "truth": json.loads(truth.read_text().splitlines()[0]),
               "spinners": len(spinners), "cpus": cpus, "load": os.getloadavg()[0], "loaded_from": loaded_from}


def test_the_cpu_bound_rank_does_twice_the_cpu_work_and_the_sdk_sees_it(loaded_job: dict) -> None:
    """The fault is CPU work, not a sleep: after it the slow rank's `oncpu_time` is about twice the median rank's
    (the SDK's figure, read at the root), and every rank logs it every step."""
    tree, job = loaded_job["tree"], loaded_job["job"]
    assert durable_ranks(loaded_job["out"]) == WORLD, loaded_job["out"][-3000:]
    assert loaded_job["loaded_from"] < FAULT_STEP - 5, loaded_job["loaded_from"]  # loaded well before the fault
    assert loaded_job["truth"]["slowness"] == "cpu" and loaded_job["truth"]["rank"] == SLOW

    rows = list(all_steps(tree["api"], job, "oncpu_time", STEPS).values())
    assert all(r["count"] == WORLD and r["min"] > 0.0 for r in rows), rows
    ratios = [next(v for v, rank in r["top"] if rank == SLOW) / r["p50"] for r in rows if r["step"] > FAULT_STEP]
    assert statistics.median(ratios) > 1.5, ratios


def test_the_ranks_see_the_load_the_spinners_make(loaded_job: dict) -> None:
    """The host is loaded as the ranks see it: before the fault each rank's step thread waits on the run queue at
    least PER_CPU - 2 times its time on a CPU, in the median (a thread among L runnable per CPU waits L - 1 times;
    here PER_CPU - 1 at the least). Measured with the spinners in pytest's session (one autogroup, _spin): 2.0-3.1
    on a quiet machine, 1.6-2.0 for the least loaded rank, so the 2x CPU work was 1.3x in wall time at worst; with a
    session each, 5.5-14 (load 13-35)."""
    tree, job = loaded_job["tree"], loaded_job["job"]
    first = loaded_job["loaded_from"] + 3  # the spinners' first steps are partly unloaded
    rows = {metric: {r["step"]: {rank: v for v, rank in r["top"]}
                     for r in api_steps(tree["api"], job, metric, last=10_000)}
            for metric in ("runqueue_wait", "oncpu_time")}
    ratios = [rows["runqueue_wait"][step][rank] / rows["oncpu_time"][step][rank]
              for step in range(first, FAULT_STEP) for rank in range(WORLD)
              if step in rows["runqueue_wait"] and rows["oncpu_time"].get(step, {}).get(rank, 0.0) > 0]
    assert len(ratios) >= WORLD * (FAULT_STEP - first) // 2, rows
    assert statistics.median(ratios) >= PER_CPU - 2, (statistics.median(ratios), judged(loaded_job))


def test_the_cpu_bound_straggler_is_named_on_the_loaded_host(loaded_job: dict) -> None:
    tree, job = loaded_job["tree"], loaded_job["job"]

    def events() -> list[dict] | None:
        status, body = api_get(tree["api"], f"/api/v1/jobs/{job}/events?kind=straggler&last=100")
        assert status == 200, body
        return [e for e in body["events"] if e["ranks"] == [SLOW]] or None
    try:
        found = wait_for(events, timeout=20, what="a straggler event naming the CPU-bound rank")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{judged(loaded_job)}") from None
    # Named exactly, and not excused: by an event open to the job's end. Not within the 3 steps: on the
    # loaded host the run-queue discount takes part of the rank's lead on its first slow steps (docs/detectors.md,
    # "CPU work is not descheduling": named 1-6 steps after the onset here, at load 13-35). Before
    # the on-CPU times were used it was left as descheduled: no event, or one that closed while it was slow.
    # (An event before the fault is the machine's own noise: bench/detection.py --matrix counts those.)
    named_at = min(max(e["detail"]["detected_step"], e["step"]) for e in found)
    assert FAULT_STEP <= named_at <= STEPS - 2, judged(loaded_job)
    assert any(e["status"] == "open" or e["detail"].get("closed_because") == "job finished" for e in found), \
        judged(loaded_job)  # held to the job's end
    _, every = api_get(tree["api"], f"/api/v1/jobs/{job}/events?kind=straggler&last=100")
    assert all(e["ranks"] == [SLOW] for e in every["events"] if e["detail"]["detected_step"] >= FAULT_STEP), \
        judged(loaded_job)


def judged(loaded_job: dict) -> str:
    """What the root judged, for a failing assertion to explain itself: the host's load, every straggler and
    cpu_starved event, and per step the waits, step times, run-queue waits and on-CPU times by rank."""
    tree, job = loaded_job["tree"], loaded_job["job"]
    rows = {metric: {r["step"]: r for r in api_steps(tree["api"], job, metric, last=10_000)}
            for metric in ("collective_wait", "step_time", "runqueue_wait", "oncpu_time")}
    lines = [f"{job}: {loaded_job['spinners']} spinners on {loaded_job['cpus']} CPUs from step "
             f"{loaded_job['loaded_from']}, load {loaded_job['load']:.1f}"]
    for kind in ("straggler", "cpu_starved"):
        _, body = api_get(tree["api"], f"/api/v1/jobs/{job}/events?kind={kind}&last=100")
        lines += [f"  {kind} step {e['step']} .. {e['last_step']} ranks {e['ranks']}: {json.dumps(e['detail'])}"
                  for e in (body or {}).get("events", [])]
    lines.append("  step  wait p50 min argmin | step p50 | runq by rank | oncpu by rank")
    for step in sorted(rows["collective_wait"]):
        w, t, q, c = (rows[m].get(step, {}) for m in ("collective_wait", "step_time", "runqueue_wait", "oncpu_time"))
        lines.append(f"  {step:4d} {w.get('p50')} {w.get('min')} {w.get('argmin')} | {t.get('p50')} | "
                     f"{sorted((r, round(v, 4)) for v, r in q.get('top', []))} | "
                     f"{sorted((r, round(v, 4)) for v, r in c.get('top', []))}")
    return "\n".join(lines)
