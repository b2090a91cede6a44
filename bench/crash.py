#!/usr/bin/env python
"""When ranks die (issue 25): time from the first death to the `crash` event at the root, per cause; how often the
right rank and its reason are attached; and what the SDK's last words add to a dying rank's exit.

    python bench/crash.py [--out bench/results] [--quick] [--rounds 3] [--causes raise,sigkill,...]

Starts a real local tree (`telemetry collector` as the root with --db and --api, one `telemetry agent` on a Unix
socket, defaults), then runs real `torchrun` jobs one after another: tests/crash_job.py, 3 ranks (gloo, CPU), the
README's lines only, rank 1 dying at step 12 in the way named (raise, loader, sigkill, abort, segv, mismatch, exit3;
see that file). For each job it reads the fault's wall time from the rank's own line (same host, same clock) and
polls the root's events API every --poll-s for the job's crash event, noting when it was first seen and when it
held every rank's account. Scored per job:

  named    the event's first rank is rank 1 (mismatch: the rank gloo aborted is first and rank 1 is named as the
           rank whose collective differed)
  reason   the first rank's cause is the one expected for the fault (exception with the injected message,
           exit_code 3, killed, fatal_signal with the signal), i.e. the why is attached, not only the death
  delay    seconds from the fault (the rank's clock) to the event's first sighting at the root (the poll interval
           bounds its resolution), and to the event holding all 3 ranks

Then the SDK's exit path: a rank process that connects and raises, N times each with the last words off
(TELEMETRY_LAST_WORDS=0), on, and on with the agent gone (no stream: nothing to wait for); the time from the raise
(the child's clock) to the process's end (the parent's), median and max.

Exit status: 0 when every planned job ran, 1 when a service or a job failed (what was measured is still written),
2 on bad arguments. JSON: OUT/crash.json.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from harness import BenchError, Progress, apply_quick, failure, parser, run_in_workdir, write_result
from machine import REPO, machine_facts

sys.path.insert(0, str(REPO))

from bench.torchrun_jobs import root_and_agent, torchrun
from collectors.demo.train import kill_job

JOB = REPO / "tests" / "crash_job.py"
CAUSES = ("raise", "loader", "exit3", "sigkill", "abort", "segv", "mismatch")
EXPECTED = {"raise": ("exception", "CUDA out of memory"), "loader": ("exception", "DataLoader worker"),
            "exit3": ("exit_code", "exit code 3"), "sigkill": ("killed", "SIGKILL"),
            "abort": ("fatal_signal", "SIGABRT"), "segv": ("fatal_signal", "SIGSEGV"),
            "mismatch": ("fatal_signal", "SIGABRT")}
QUICK = {"rounds": 1, "exit_runs": 3}


progress = Progress()  # made at import, as the bench starts


def api_get(api: str, path: str) -> Any:
    with urllib.request.urlopen(f"http://{api}{path}", timeout=10) as reply:
        return json.load(reply)


def fault_time(log: Path) -> float | None:
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith('{"event": "fault"'):
            try:
                return float(json.loads(line)["time"])
            except (ValueError, KeyError):
                return None
    return None


def score(cause: str, event: dict[str, Any] | None) -> dict[str, Any]:
    if event is None:
        return {"named": False, "reason": False}
    d = event["detail"]
    first = d["first"][0] if d["first"] else {}
    want, text = EXPECTED[cause]
    reason = first.get("cause") == want and text in (first.get("why") or "")
    if cause == "mismatch":
        named = (d.get("mismatch") or {}).get("ranks") == [1]
    else:
        named = [f["rank"] for f in d["first"]] == [1]
    return {"named": named, "reason": reason, "first": first, "summary": d.get("summary")}


def one_job(cause: str, args: Any, tree: dict[str, Any], workdir: Path) -> dict[str, Any]:
    job = f"crash-{cause}-{uuid.uuid4().hex[:6]}"
    log = workdir / f"{job}.log"
    proc = torchrun(3, JOB, ["--job", job, "--fault", cause], tree["agent"], log, launcher=("--max-restarts", "0"))
    seen_at = settled_at = None
    event = None
    deadline = time.time() + args.job_timeout
    try:
        while time.time() < deadline:
            try:
                found = api_get(tree["api"], f"/api/v1/jobs/{job}/events?kind=crash")["events"]
            except (OSError, urllib.error.URLError, ValueError):
                found = []
            now = time.time()
            if found:
                event = found[0]
                seen_at = seen_at or now
                d = event["detail"]
                if len(d["first"]) + len(d["cascade"]) == 3:
                    settled_at = now
                    break
            if proc.poll() is not None and seen_at is None and now > deadline - args.job_timeout + 60:
                break
            time.sleep(args.poll_s)
    finally:
        if proc.poll() is None:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                kill_job(proc, job)
    fault = fault_time(log)
    scored = score(cause, event)
    return {"job": job, "cause": cause, "fault_time": fault, "returncode": proc.returncode,
            "event_seen_s": round(seen_at - fault, 3) if seen_at and fault else None,
            "event_settled_s": round(settled_at - fault, 3) if settled_at and fault else None,
            "event_time_vs_fault_s": round(event["time"] - fault, 3) if event and fault else None,
            **scored}


CHILD = """
import sys, time
import telemetry
run = telemetry.init(job=sys.argv[1], rank=0, world_size=1, agent=sys.argv[2])
run.wait_connected(float(sys.argv[3]))
hook = sys.excepthook  # the SDK's (chained to the default one, which prints the traceback), or the default


def timed(*exc):
    started = time.perf_counter()
    hook(*exc)
    print(f"hook_s {time.perf_counter() - started}", flush=True)


sys.excepthook = timed
print(time.time(), flush=True)
raise RuntimeError("injected")
"""


def exit_latency(args: Any, agent: str, workdir: Path) -> dict[str, Any]:
    script = workdir / "exit_child.py"
    script.write_text(CHILD)
    modes = {"last words off": ({"TELEMETRY_LAST_WORDS": "0"}, agent, "20"),
             "last words on": ({}, agent, "20"),
             "last words on, no agent": ({}, f"unix:{workdir}/nobody.sock", "0.5")}
    out: dict[str, Any] = {}
    for mode, (env, address, wait) in modes.items():
        samples, hooks = [], []
        for i in range(args.exit_runs):
            child = subprocess.Popen([sys.executable, str(script), f"exit-{i}-{uuid.uuid4().hex[:4]}", address, wait],
                                     env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True)
            line = child.stdout.readline() if child.stdout else ""
            rest = child.stdout.read() if child.stdout else ""
            child.wait(60)
            ended = time.time()
            if line.strip():
                samples.append(ended - float(line))
            hooks += [float(x.split()[1]) for x in rest.splitlines() if x.startswith("hook_s ")]
        out[mode] = {"runs": len(samples), "median_s": round(statistics.median(samples), 4) if samples else None,
                     "max_s": round(max(samples), 4) if samples else None,
                     "excepthook_median_s": round(statistics.median(hooks), 4) if hooks else None,
                     "excepthook_max_s": round(max(hooks), 4) if hooks else None}
        progress(f"exit path, {mode}: {out[mode]}")
    on, off = out["last words on"]["median_s"], out["last words off"]["median_s"]
    out["added_median_s"] = round(on - off, 4) if on is not None and off is not None else None
    return out


def detector_scale(world: int = 16384, per_unit: int = 100) -> dict[str, Any]:
    """The root's crash detector fed a whole job's deaths (every rank of `world`, `per_unit` accounts per unit, as
    the tree delivers them): seconds in all, and for one periodic check after (both under the detectors' lock)."""
    from collectors.detectors.crash import CrashDetector
    from collectors.detectors.events import EventLog

    detector = CrashDetector(EventLog(None))
    prints = [(seq, seq, f"all_reduce in=Float[4] seq {seq}") for seq in range(16)]
    started = time.perf_counter()
    for first in range(0, world, per_unit):
        detector.observe_exits("scale@1", [
            {"rank": r, "host": f"h{r // 8}", "cause": "exception" if r == 0 else "terminated", "why": "x",
             "died_at": 10.0 + r * 1e-5, "exc_type": "RuntimeError", "message": "", "step": 12, "last_enqueued": 24,
             "fingerprints": list(prints), "traceback": "t" * 4000} for r in range(first, min(world, first + per_unit))])
    fed = time.perf_counter() - started
    started = time.perf_counter()
    detector.check({"scale@1": {"alive": 0, "stuck": 0, "dead": world, "dead_ranks": list(range(1024))}})
    return {"world": world, "per_unit": per_unit, "all_accounts_s": round(fed, 3),
            "one_check_s": round(time.perf_counter() - started, 4)}


def aggregate(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for cause in CAUSES:
        mine = [j for j in jobs if j["cause"] == cause]
        if not mine:
            continue
        seen = [j["event_seen_s"] for j in mine if j["event_seen_s"] is not None]
        settled = [j["event_settled_s"] for j in mine if j["event_settled_s"] is not None]
        table[cause] = {"jobs": len(mine), "events": len(seen),
                        "named": sum(j["named"] for j in mine), "reason": sum(j["reason"] for j in mine),
                        "seen_median_s": round(statistics.median(seen), 2) if seen else None,
                        "seen_max_s": round(max(seen), 2) if seen else None,
                        "settled_median_s": round(statistics.median(settled), 2) if settled else None}
    return table


def print_table(result: dict[str, Any]) -> None:
    print("| cause | jobs | event | first rank named | reason attached | fault -> event s (median / max) | "
          "-> every rank's account s |")
    print("|---|---|---|---|---|---|---|")
    for cause, row in result["aggregate"].items():
        print(f"| {cause} | {row['jobs']} | {row['events']} | {row['named']} | {row['reason']} | "
              f"{row['seen_median_s']} / {row['seen_max_s']} | {row['settled_median_s']} |")
    for key in ("exit", "detector_scale"):
        if result.get(key):
            print(json.dumps(result[key], indent=1))


def run(args: Any, workdir: Path) -> dict[str, Any]:
    result: dict[str, Any] = {"machine": machine_facts(), "config": vars(args) | {"out": str(args.out)},
                              "jobs": [], "complete": False, "loadavg_start": os.getloadavg()}
    try:
        with root_and_agent(workdir) as tree:
            todo = [cause for _ in range(args.rounds) for cause in args.causes.split(",")]
            for i, cause in enumerate(todo, 1):
                record = one_job(cause, args, tree, workdir)
                result["jobs"].append(record)
                progress(f"{i}/{len(todo)} {cause}: event after {record['event_seen_s']} s, all ranks after "
                         f"{record['event_settled_s']} s, named {record['named']}, reason {record['reason']}")
            result["exit"] = exit_latency(args, tree["agent"], workdir)
        result["detector_scale"] = detector_scale()
        progress(f"crash detector, a 16,384-rank job's deaths: {result['detector_scale']}")
        result["complete"] = True
    except (BenchError, KeyboardInterrupt, OSError) as exc:
        result["error"] = failure(exc)
    result["aggregate"] = aggregate(result["jobs"])
    result["loadavg_end"] = os.getloadavg()
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = parser(__doc__, "crash", QUICK)
    p.add_argument("--rounds", type=int, default=3, help="jobs per cause (default 3)")
    p.add_argument("--causes", default=",".join(CAUSES), help=f"comma-separated, of {', '.join(CAUSES)}")
    p.add_argument("--exit-runs", type=int, default=10, help="processes per mode for the exit path (default 10)")
    p.add_argument("--poll-s", type=float, default=0.05, help="seconds between polls of the events API")
    p.add_argument("--job-timeout", type=float, default=120.0, help="seconds one job may take")
    p.add_argument("--workdir", type=Path, help="keep logs and the root's DB here (else a temp dir)")
    args = p.parse_args(argv)
    apply_quick(args, argv, QUICK)
    for cause in args.causes.split(","):
        if cause not in CAUSES:
            p.error(f"unknown cause {cause!r}")
    if args.rounds < 1 or args.exit_runs < 1:
        p.error("--rounds and --exit-runs must be at least 1")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    result = run_in_workdir("crash", args.workdir, lambda workdir: run(args, workdir))
    print_table(result)
    return write_result(args.out, "crash", result, "crash bench")


if __name__ == "__main__":
    raise SystemExit(main())
