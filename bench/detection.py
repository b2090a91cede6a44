#!/usr/bin/env python
"""Detection quality on real training (issue 12): false alarms on clean runs, faults caught, delay, rank named.

    python bench/detection.py [--out bench/results] [--quick] [--models mlp,lm] [--faults ...]

Starts a real local tree (`telemetry collector` as the root with --db and --api, one `telemetry agent` on a
Unix socket; the detectors at their defaults unless --detectors), then runs real `torchrun` jobs one after
another: bench/detection_jobs/train.py, DDP on CPU (gloo), --world ranks, one intra-op thread each,
telemetry through the README's lines only. Two models (a small MLP regression on random data; a
character-level transformer on the documentation text CPython ships), several seeds, clean and with one
injected fault each (on rank (seed + i) mod world, at half the run):

  slow_rank     the rank sleeps inside every step from then on (x --slow-factor its median step)
  loader_stuck  the rank's data loader blocks for --stall-s seconds (longer than hang's 60 s default floor)
  nan           NaN in the rank's forward output for one step
  bad_batch     corrupted targets on the rank for one step (a loss spike)
  slow_loader   the rank's data loader slows by (--slow-factor - 1) x its median step from then on

While a job runs the harness polls the root's events API (every --poll-s) to see when each event
opened; afterwards it scores every run (bench/detection_jobs/score.py says how) and prints, per
detector: false alarms per 1,000 clean steps, faults detected, delay in steps and seconds, and the rank
named against the truth; JSON under --out (detection.json): the machine, the configuration, the
aggregate, every run's score and every event seen.

With --matrix it runs the straggler matrix instead (bench/detection_jobs/matrix.py says how it is scored):
bench/detection_jobs/shapes.py in the shapes real jobs have (--shapes: DDP with several buckets and the
loss all-reduced for logging, FSDP2 with gradient clipping, two synchronous all-reduces, gradient
accumulation under no_sync, a tensor-parallel subgroup), one rank slowed by each of --factors in each
place of --wheres (forward, backward, optimizer, data) from --fault-step, plus --clean-runs clean runs of
--clean-steps per shape; it prints the matrix (delay in steps and seconds, the rank named) and false alarms
per 1,000 clean steps per shape, and writes detection_matrix.json with every run's per-step
`collective_wait` figures (least-waiting rank, min, p50, the step's p50) for replaying the rule.

Exit status: 0 when every planned run finished (whatever the detectors did), 1 when a service or a
training job failed (what was measured is still written), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# bench/ is this script's folder (first on sys.path): its neighbours import as they are
from harness import BenchError, Progress, apply_quick, failure, parser, run_in_workdir, write_result
from machine import REPO, machine_facts

sys.path.insert(0, str(REPO))  # the checkout: when run as a script only bench/ is on sys.path

from bench.detection_jobs import matrix
from bench.detection_jobs.logs import done_lines
from bench.detection_jobs.score import aggregate, score_run, table
from bench.torchrun_jobs import root_and_agent, torchrun
from collectors.demo.train import kill_job
from collectors.sim.procs import Proc
from telemetry.names import ONCPU_METRIC, RUNQUEUE_METRIC, WAIT_METRIC, WAIT_SHARE_METRIC, WORK_METRIC

TRAIN = REPO / "bench" / "detection_jobs" / "train.py"
SHAPES = REPO / "bench" / "detection_jobs" / "shapes.py"
FAULTS = ("slow_rank", "loader_stuck", "nan", "bad_batch", "slow_loader")
# The per-rank figures a matrix run records per step (its `per_rank`, in this order after the step). The step
# thread's on-CPU time is the SDK's `oncpu_time`; runs recorded before the SDK logged it hold the bench's own
# `bench.oncpu_step` (the same figure) in its place
# Each rank's figures per step, in this order (readers index them; a new one goes last): its wait, run-queue wait (the
# step thread's, then every thread's), on-CPU time (the same two), and its work_time, what its agent divides by for
# the running share (collectors/agent/wait_share.py): a replay remakes the shares from the recorded work, not from
# the step's p50, where a run has it
PER_RANK = (WAIT_METRIC, RUNQUEUE_METRIC, "bench.runqueue_threads", ONCPU_METRIC, "bench.oncpu_threads", WORK_METRIC)
QUICK = {"models": "mlp", "clean_seeds": 1, "fault_seeds": 1, "faults": "nan,bad_batch", "mlp_steps": 200}


@dataclass
class Plan:
    model: str
    seed: int
    fault: str
    fault_rank: int
    steps: int

    @property
    def fault_step(self) -> int:
        return self.steps // 2


def plans(args: argparse.Namespace) -> list[Plan]:
    """Clean runs first (--clean-seeds per model), then each fault with --fault-seeds seeds per model
    (loader_stuck: --stuck-seeds, it costs --stall-s each)."""
    out: list[Plan] = []
    models = args.models.split(",")
    faults = [f for f in args.faults.split(",") if f]
    for model in models:
        steps = args.mlp_steps if model == "mlp" else args.lm_steps
        out += [Plan(model, seed, "none", -1, steps)
                for seed in range(args.first_seed, args.first_seed + args.clean_seeds)]
    for model in models:
        steps = args.mlp_steps if model == "mlp" else args.lm_steps
        for i, fault in enumerate(faults):
            seeds = args.stuck_seeds if fault == "loader_stuck" else args.fault_seeds
            out += [Plan(model, seed, fault, (seed + i) % args.world, steps)
                    for seed in range(args.first_seed, args.first_seed + seeds)]
    return out


# ---------------------------------------------------------------- the tree and the API


def api_get(api: str, path: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(f"http://{api}{path}", timeout=timeout) as reply:
        return json.load(reply)


# ---------------------------------------------------------------- one run


def train_args(plan: Plan, job: str, truth: Path, args: argparse.Namespace) -> list[str]:
    """bench/detection_jobs/train.py's arguments for one planned run."""
    return ["--job", job, "--model", plan.model, "--steps", str(plan.steps), "--seed", str(plan.seed),
            "--fault", plan.fault, "--fault-rank", str(plan.fault_rank), "--fault-step", str(plan.fault_step),
            "--slow-factor", str(args.slow_factor), "--stall-s", str(args.stall_s), "--truth", str(truth)]


class EventWatch:
    """Polls a job's events; keeps each event's first sighting (when it opened, the ranks it named then)."""

    def __init__(self, api: str, job: str) -> None:
        self.api, self.job = api, job
        self.first: dict[int, dict[str, Any]] = {}
        self.since = 0

    def poll(self) -> None:
        now = time.time()
        try:
            body = api_get(self.api, f"/api/v1/jobs/{self.job}/events?since_id={self.since}&last=10000")
        except (OSError, urllib.error.URLError, ValueError):
            return  # the next poll sees it; a dead root is caught by the caller
        for event in body["events"]:
            self.since = max(self.since, event["id"])
            # An event seen before its first change still has its opening time in `updated`.
            exact = event["updates"] == 0 and event["status"] == "open"
            self.first.setdefault(event["id"], {"opened": event["updated"] if exact else min(now, event["updated"]),
                                                "exact": exact, "ranks": event["ranks"], "seen_at": now})

    def events(self) -> list[dict[str, Any]]:
        """Every event of the job as it stands now, each with its first sighting under "seen"."""
        body = api_get(self.api, f"/api/v1/jobs/{self.job}/events?last=10000")
        out = []
        for event in body["events"]:
            seen = self.first.get(event["id"])
            if seen is None:  # opened after the last poll: seen now, a bound only
                seen = {"opened": event["updated"], "exact": event["updates"] == 0 and event["status"] == "open",
                        "ranks": event["ranks"], "seen_at": time.time()}
            out.append({**event, "seen": seen})
        return out


def drive(job: str, world: int, script: Path, argv: list[str], steps: int, agent: str, log_path: Path,
          watch: EventWatch, services: tuple[Proc, Proc], timeout: float, poll_s: float) -> float:
    """One torchrun job of `world` ranks to its end, its events polled as they open, then until the root has
    finalised its last step (every rank closed durably: within a flush or two). Returns its wall seconds;
    BenchError when it outlives `timeout`, fails, or a service dies under it."""
    started = time.time()
    proc = torchrun(world, script, argv, agent, log_path, launcher=("--rdzv-id", job, "--max-restarts", "0"))
    try:
        while proc.poll() is None:
            if time.time() - started > timeout:
                raise BenchError(f"{job} did not finish in {timeout:.0f} s")
            if not all(s.alive() for s in services):
                raise BenchError(f"a service exited during {job}")
            watch.poll()
            time.sleep(poll_s)
    finally:
        if proc.poll() is None:
            kill_job(proc, job)
    wall = time.time() - started
    if proc.returncode != 0:
        raise BenchError(f"{job} exited with {proc.returncode}:\n{log_path.read_text(errors='replace')[-3000:]}")
    deadline = time.time() + 10.0
    while time.time() < deadline:
        watch.poll()
        jobs = {j["job"]: j for j in api_get(watch.api, "/api/v1/jobs")["jobs"]}
        if (jobs.get(job, {}).get("last_step") or -1) >= steps - 1:
            break
        time.sleep(poll_s)
    time.sleep(1.0)
    watch.poll()
    return wall


def run_one(plan: Plan, args: argparse.Namespace, api: str, agent: str, workdir: Path,
            services: tuple[Proc, Proc]) -> dict[str, Any]:
    job = f"det-{plan.model}-{plan.fault}-s{plan.seed}-{uuid.uuid4().hex[:6]}"
    truth_path, log_path = workdir / f"{job}.truth.jsonl", workdir / f"{job}.log"
    watch = EventWatch(api, job)
    load_start = os.getloadavg()[0]
    timeout = args.run_timeout + (args.stall_s if plan.fault == "loader_stuck" else 0.0)
    wall = drive(job, args.world, TRAIN, train_args(plan, job, truth_path, args), plan.steps, agent, log_path, watch,
                 services, timeout, args.poll_s)
    finalised = [[s["step"], s["finalised_ns"]] for s in
                 api_get(api, f"/api/v1/jobs/{job}/steps?metric=step_time&last=10000")["steps"]]
    truths = [json.loads(line) for line in truth_path.read_text().splitlines()] if truth_path.exists() else []
    done = done_lines(log_path)
    return {"job": job, "model": plan.model, "seed": plan.seed, "fault": plan.fault, "steps": plan.steps,
            "steps_done": len(finalised), "world": args.world, "wall_s": round(wall, 1),
            "loadavg_1min": [round(load_start, 2), round(os.getloadavg()[0], 2)],
            "truth": truths[0] if truths else None, "events": watch.events(), "finalised": finalised,
            "ranks_done": [{"rank": d["rank"], "durable": d["durable"], "stats": d["stats"],
                            "median_step_s": d["median_step_s"]} for d in done]}


# ---------------------------------------------------------------- the whole bench


def run(args: argparse.Namespace, workdir: Path, progress: Progress) -> dict[str, Any]:
    """Every planned run, scored as it ends; `result` is filled as it goes so a failure keeps what was measured."""
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    result: dict[str, Any] = {"benchmark": "detection", "complete": False, "machine": machine_facts(),
                              "config": config, "loadavg_start": os.getloadavg(), "runs": []}
    todo = plans(args)
    try:
        with root_and_agent(workdir, root_args=("--detectors", args.detectors) if args.detectors else ()) as tree:
            services = root, agent = tree["services"]
            assert root.popen is not None and agent.popen is not None  # started
            api = tree["api"]
            progress(f"tree up (root pid {root.popen.pid}, agent pid {agent.popen.pid}, API {api}); {len(todo)} runs")
            for i, plan in enumerate(todo, 1):
                record = run_one(plan, args, api, tree["agent"], workdir, services)
                scored = score_run(record)
                result["runs"].append({**record, "score": scored})
                progress(f"{i}/{len(todo)} {plan.model} seed {plan.seed} {plan.fault}"
                         f"{f' on rank {plan.fault_rank}' if plan.fault != 'none' else ''}: {record['wall_s']} s, "
                         f"{record['steps_done']} steps; {describe(scored)}")
        result["complete"] = True
    except (BenchError, KeyboardInterrupt) as exc:
        result["error"] = failure(exc)
    result["aggregate"] = aggregate([r["score"] for r in result["runs"]])
    result["loadavg_end"] = os.getloadavg()
    return result


def run_cell(cell: matrix.Cell, args: argparse.Namespace, api: str, agent: str, workdir: Path,
             services: tuple[Proc, Proc]) -> dict[str, Any]:
    """One matrix cell: a shapes.py job, its events as they open, and its per-step waits."""
    job = f"mx-{cell.name.replace('.', '_')}-{uuid.uuid4().hex[:6]}"
    truth_path, log_path = workdir / f"{job}.truth.jsonl", workdir / f"{job}.log"
    watch = EventWatch(api, job)
    argv = ["--job", job, "--shape", cell.shape, "--steps", str(cell.steps), "--seed", str(cell.seed),
            "--fault-rank", str(cell.fault_rank), "--fault-step", str(cell.fault_step),
            "--factor", str(cell.factor or 1.0), "--where", cell.where if cell.factor else "forward",
            "--truth", str(truth_path), "--slowness", args.slowness]
    load_start = os.getloadavg()[0]
    wall = drive(job, cell.world, SHAPES, argv, cell.steps, agent, log_path, watch, services, args.run_timeout,
                 args.poll_s)
    steps = {s["step"]: s for s in api_get(api, f"/api/v1/jobs/{job}/steps?metric=step_time&last=10000")["steps"]}
    waits = api_get(api, f"/api/v1/jobs/{job}/steps?metric=collective_wait&last=10000")["steps"]
    shares = api_get(api, f"/api/v1/jobs/{job}/steps?metric={WAIT_SHARE_METRIC}&last=10000")["steps"]
    per_rank = {name: {s["step"]: s["top"] for s in
                       api_get(api, f"/api/v1/jobs/{job}/steps?metric={name}&last=10000")["steps"]}
                for name in PER_RANK}
    truths = [json.loads(line) for line in truth_path.read_text().splitlines()] if truth_path.exists() else []
    return {"job": job, "cell": cell.name, "shape": cell.shape, "factor": cell.factor, "where": cell.where,
            "world": cell.world, "steps": cell.steps, "steps_done": len(steps), "wall_s": round(wall, 1),
            "loadavg_1min": [round(load_start, 2), round(os.getloadavg()[0], 2)],
            "truth": truths[0] if truths else None, "events": watch.events(),
            "finalised": [[n, s["finalised_ns"]] for n, s in sorted(steps.items())],
            # [step, least-waiting rank, min, p50, count, the step's step_time p50, max, most-waiting rank]: the
            # rule's input, for replay (bench/detection_jobs/replay.py --matrix)
            "waits": [[w["step"], w["argmin"], w["min"], w["p50"], w["count"], (steps.get(w["step"]) or {}).get("p50"),
                       w["max"], w["argmax"]] for w in waits],
            # [step, rank with the lowest running wait share, min, p50, count]: the agents' running shares (the
            # slow and persistence lanes' input), for replay
            "shares": [[w["step"], w["argmin"], w["min"], w["p50"], w["count"]] for w in shares],
            # [step, {rank: collective_wait}, {rank: runqueue_wait}, {rank: every thread's run-queue wait},
            # {rank: the step thread's on-CPU time}, {rank: every thread's on-CPU time}]: each rank's own figures
            # (the summaries' exact top-k holds every rank of these small jobs), for bench/detection_jobs/runqueue.py
            "per_rank": [[step, *({str(r): v for v, r in per_rank[name].get(step) or []} for name in PER_RANK)]
                         for step in sorted(per_rank[WAIT_METRIC])],
            "ranks_done": [{"rank": d["rank"], "durable": d["durable"], "median_step_s": d["median_step_s"]}
                           for d in done_lines(log_path)]}


def run_matrix(args: argparse.Namespace, workdir: Path, progress: Progress) -> dict[str, Any]:
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    result: dict[str, Any] = {"benchmark": "detection_matrix", "complete": False, "machine": machine_facts(),
                              "config": config, "loadavg_start": os.getloadavg(), "runs": []}
    cells = matrix.plan(args.shapes.split(","), [float(f) for f in args.factors.split(",")], args.wheres.split(","),
                        args.fault_step, args.clean_steps, args.clean_runs,
                        args.slight_wheres.split(",") if args.slight_wheres else None)
    try:
        with root_and_agent(workdir, root_args=("--detectors", args.detectors) if args.detectors else ()) as tree:
            services = tree["services"]
            progress(f"tree up (API {tree['api']}); {len(cells)} runs")
            for i, cell in enumerate(cells, 1):
                record = run_cell(cell, args, tree["api"], tree["agent"], workdir, services)
                scored = matrix.score_cell(record)
                result["runs"].append({**record, "score": scored})
                det = scored.get("detection")
                progress(f"{i}/{len(cells)} {cell.name} (rank {cell.fault_rank}): {record['wall_s']} s, "
                         f"{record['steps_done']} steps; "
                         f"{matrix._cell_text(det) if det else 'clean'}; false alarms {len(scored['false_alarms'])}")
        result["complete"] = True
    except (BenchError, KeyboardInterrupt) as exc:
        result["error"] = failure(exc)
    scored_all = [r["score"] for r in result["runs"]]
    result["aggregate"] = matrix.aggregate(scored_all)
    result["table"] = matrix.table(scored_all, result["aggregate"])
    result["loadavg_end"] = os.getloadavg()
    return result


def describe(scored: dict[str, Any]) -> str:
    found = []
    for kind, d in scored["detections"].items():
        found.append(f"{kind} +{d['delay_steps']} steps, {d['delay_s']} s, ranks {d['ranks']}" if d["detected"]
                     else f"{kind} missed")
    alarms = [f"{e['kind']}@{e['step']}{e['ranks']}" for e in scored["false_alarms"]]
    return "; ".join(found + [f"false alarms: {', '.join(alarms) or 'none'}"])


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = parser(__doc__, "detection", QUICK)
    p.add_argument("--models", default="mlp,lm", help="comma-separated: mlp, lm (default both)")
    p.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)} (default all)")
    p.add_argument("--clean-seeds", type=int, default=4, help="clean runs per model (default 4)")
    p.add_argument("--fault-seeds", type=int, default=2, help="runs per fault and model (default 2)")
    p.add_argument("--stuck-seeds", type=int, default=1, help="loader_stuck runs per model (default 1)")
    p.add_argument("--first-seed", type=int, default=0,
                   help="seeds start here (default 0; tune thresholds on other seeds than those reported)")
    p.add_argument("--mlp-steps", type=int, default=600, help="steps of an MLP run (default 600)")
    p.add_argument("--lm-steps", type=int, default=300, help="steps of a transformer run (default 300)")
    p.add_argument("--world", type=int, default=3, help="ranks per job (default 3)")
    p.add_argument("--slow-factor", type=float, default=2.0,
                   help="slow_rank / slow_loader: the rank's step or batch takes this x its median step (default 2)")
    p.add_argument("--stall-s", type=float, default=75.0, help="loader_stuck: seconds blocked (default 75)")
    p.add_argument("--poll-s", type=float, default=0.2, help="seconds between polls of the events API (default 0.2)")
    p.add_argument("--run-timeout", type=float, default=300.0, help="seconds one job may take (+ --stall-s)")
    p.add_argument("--detectors", default=None, help="the root's --detectors (file or inline JSON; default: defaults)")
    p.add_argument("--matrix", action="store_true", help="run the straggler matrix (shapes x where x factor) instead")
    p.add_argument("--shapes", default=",".join(matrix.SHAPES), help="--matrix: comma-separated shapes (default all)")
    p.add_argument("--factors", default=",".join(f"{f:g}" for f in matrix.FACTORS),
                   help="--matrix: the slow rank's step x its median (default 2,1.5,1.2,1.1)")
    p.add_argument("--wheres", default=",".join(matrix.WHERE), help="--matrix: where the slowness is (default all)")
    p.add_argument("--slight-wheres", default="",
                   help="--matrix: where the 1.1x runs (110 steps after the fault each) put it (default: every --wheres)")
    p.add_argument("--fault-step", type=int, default=30, help="--matrix: the step the slowness begins (default 30)")
    p.add_argument("--slowness", choices=("sleep", "cpu"), default="sleep",
                   help="--matrix: the slow rank sleeps, or does more CPU work (shapes.py --slowness; default sleep)")
    p.add_argument("--clean-steps", type=int, default=300, help="--matrix: steps of a clean run (default 300)")
    p.add_argument("--clean-runs", type=int, default=1, help="--matrix: clean runs per shape (default 1)")
    p.add_argument("--workdir", type=Path,
                   help="keep logs, the agent's socket and the root's DB here (else a temp dir)")
    args = p.parse_args(argv)
    apply_quick(args, argv, QUICK)
    for name, given, known in (("shape", args.shapes, matrix.SHAPES), ("where", args.wheres, matrix.WHERE)):
        for value in given.split(","):
            if value not in known:
                p.error(f"unknown {name} {value!r} (one of {', '.join(known)})")
    try:
        if any(not 1.0 < float(f) <= 10.0 for f in args.factors.split(",")):
            p.error("--factors must each be in (1, 10]")
    except ValueError:
        p.error(f"--factors must be numbers, got {args.factors!r}")
    for model in args.models.split(","):
        if model not in ("mlp", "lm"):
            p.error(f"unknown model {model!r}")
    for fault in filter(None, args.faults.split(",")):
        if fault not in FAULTS:
            p.error(f"unknown fault {fault!r}")
    if args.world < 2:
        p.error("--world must be at least 2 (the faults are on one rank of several)")
    for name in ("mlp_steps", "lm_steps"):
        if getattr(args, name) < 40:
            p.error(f"--{name.replace('_', '-')} must be at least 40")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    progress = Progress()
    if args.matrix:
        result = run_in_workdir("detection", args.workdir, lambda workdir: run_matrix(args, workdir, progress))
        print(result["table"])
        return write_result(args.out, "detection_matrix", result, "detection matrix bench")
    result = run_in_workdir("detection", args.workdir, lambda workdir: run(args, workdir, progress))
    print(table(result["aggregate"]))  # also when incomplete: the runs that were scored
    return write_result(args.out, "detection", result, "detection bench")


if __name__ == "__main__":
    raise SystemExit(main())
