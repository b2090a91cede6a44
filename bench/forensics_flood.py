"""On-demand captures flooded at a live torchrun job (issue 26): does forensics hurt training?

    .venv/bin/python bench/forensics_flood.py                 # 2 x 600 steps, the flood ~1 minute
    .venv/bin/python bench/forensics_flood.py --steps 3000    # minutes

A real root and agent (processes) and tests/forensics_job.py under torchrun (gloo, CPU, --world ranks, no
fault). The job runs three times on the same tree: quiet; a control, while --threads clients POST capture
requests for a job that is not live (404: the same HTTP load on the same cores, no capture); and flooded,
while they POST `/api/v1/jobs/{job}/forensics` for every rank as fast as the root answers, for the job's whole
life. Flooded over control is what the captures cost the job; flooded over quiet includes the flood's own
CPU (clients and root on the job's host, as a bench on one machine must). Per run
it records the job's wall time and exit, its median and p90 step time (from the root's API), the most
threads any rank had, and what the flood got (202 / 429 / other). Prints both and their ratio; writes
bench/results/forensics_flood.json (--out). tests/test_forensics_limits.py runs a short flood in CI.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: only bench/ is on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.torchrun_jobs import REPO, root_and_agent, torchrun

JOB_SCRIPT = REPO / "tests" / "forensics_job.py"


def post_capture(api: str, job: str, ranks: list[int]) -> tuple[int, dict[str, str]]:
    """One on-demand capture request: (HTTP status, headers)."""
    request = urllib.request.Request(f"http://{api}/api/v1/jobs/{job}/forensics", method="POST",
                                     data=json.dumps({"ranks": ranks}).encode())
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, dict(reply.headers)
    except urllib.error.HTTPError as exc:
        exc.read()
        return exc.code, dict(exc.headers)


class Flood:
    """`threads` clients asking for captures of `ranks` of `job` until stopped; counts the answers, and keeps
    every 429's Retry-After."""

    def __init__(self, api: str, job: str, ranks: list[int], threads: int = 4) -> None:
        self.api, self.job, self.ranks = api, job, ranks
        self.statuses: Counter[int] = Counter()
        self.retry_after: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def start(self) -> Flood:
        for thread in self._threads:
            thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                status, headers = post_capture(self.api, self.job, self.ranks)
            except OSError:
                status, headers = 0, {}
            with self._lock:
                self.statuses[status] += 1
                if status == 429:
                    self.retry_after.append(headers.get("Retry-After", ""))

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        for thread in self._threads:
            thread.join(15)
        return {"statuses": {str(k): v for k, v in sorted(self.statuses.items())}, "requests": sum(self.statuses.values())}


def rank_pids(job: str) -> list[int]:
    """The pids of `job`'s ranks (tests/forensics_job.py processes named by --job)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"forensics_job.py") for a in argv) and job.encode() in argv and \
                b"torch.distributed.run" not in argv:
            found.append(int(entry))
    return found


def threads_of(pids: list[int]) -> int:
    """The most threads any of `pids` has now (0 when none is readable)."""
    most = 0
    for pid in pids:
        try:
            most = max(most, len(os.listdir(f"/proc/{pid}/task")))
        except OSError:
            continue
    return most


def step_times(api: str, job: str, last: int) -> list[float]:
    with urllib.request.urlopen(f"http://{api}/api/v1/jobs/{job}/steps?metric=step_time&last={last}",
                                timeout=10) as reply:
        return [row["mean"] for row in json.load(reply)["steps"]]


def run_job(tree: dict[str, Any], job: str, world: int, steps: int, flood_threads: int,
            timeout: float, target: str | None = None) -> dict[str, Any]:
    """Run the job to its end, flooded with captures from the moment it is live at the root when
    `flood_threads` > 0 (of job `target` when given: a control, the same HTTP load without captures);
    returns its figures."""
    log = tree["tmp"] / f"{job}.log"
    started = time.monotonic()
    proc = torchrun(world, JOB_SCRIPT, ["--job", job, "--fault", "none", "--steps", str(steps)], tree["agent"], log)
    flood = None
    most_threads = 0
    threads_at_start = 0
    try:
        while proc.poll() is None and time.monotonic() - started < timeout:
            pids = rank_pids(job)
            if not threads_at_start and len(pids) == world and (
                    not flood_threads or post_capture(tree["api"], job, [0])[0] in (202, 429)):  # live at the root
                threads_at_start = threads_of(pids)
                if flood_threads:
                    flood = Flood(tree["api"], target or job, list(range(world)), flood_threads).start()
            if threads_at_start:
                most_threads = max(most_threads, threads_of(pids))
            time.sleep(0.1)
        code = proc.wait(max(1.0, timeout - (time.monotonic() - started)))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    wall = time.monotonic() - started
    flooded = flood.stop() if flood is not None else None
    times = step_times(tree["api"], job, steps)
    return {"job": job, "exit": code, "wall_s": round(wall, 2), "steps_stored": len(times),
            "step_time_p50_s": statistics.median(times) if times else None,
            "step_time_p90_s": statistics.quantiles(times, n=10)[-1] if len(times) >= 10 else None,
            "rank_threads_at_start": threads_at_start, "rank_threads_max": most_threads,
            "durable_ranks": log.read_text(errors="replace").count('"durable": true'),
            "flood": flooded, "retry_after": sorted(set(flood.retry_after)) if flood is not None else None,
            "log_tail": None if code == 0 else log.read_text(errors="replace")[-4000:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--world", type=int, default=3)
    parser.add_argument("--threads", type=int, default=8, help="flooding clients [8]")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, root_and_agent(Path(tmp)) as tree:
        timeout = 120 + args.steps * 0.5
        quiet = run_job(tree, "quiet", args.world, args.steps, 0, timeout)
        control = run_job(tree, "control", args.world, args.steps, args.threads, timeout, target="not-a-job")
        flooded = run_job(tree, "flooded", args.world, args.steps, args.threads, timeout)

    def ratio(over: dict[str, Any], under: dict[str, Any]) -> dict[str, float | None]:
        return {name: (over[name] / under[name] if over[name] and under[name] else None)
                for name in ("wall_s", "step_time_p50_s", "step_time_p90_s")}
    result = {"steps": args.steps, "world": args.world, "threads": args.threads, "quiet": quiet, "control": control,
              "flooded": flooded, "flooded_over_quiet": ratio(flooded, quiet),
              "flooded_over_control": ratio(flooded, control), "load_1min": os.getloadavg()[0]}
    for run in (quiet, control, flooded):
        print(f"{run['job']:8s} exit {run['exit']}  wall {run['wall_s']:.1f} s  step p50 "
              f"{(run['step_time_p50_s'] or 0) * 1e3:.1f} ms  p90 {(run['step_time_p90_s'] or 0) * 1e3:.1f} ms  "
              f"rank threads max {run['rank_threads_max']}  durable ranks {run['durable_ranks']}  "
              f"flood {run['flood']}")
    for name in ("flooded_over_quiet", "flooded_over_control"):
        print(f"{name}: " + ", ".join(f"{k} {v:.2f}" for k, v in result[name].items() if v is not None))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "forensics_flood.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
