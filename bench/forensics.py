"""Forensics on real torchrun jobs (issue 13): how fast the culprit is named and captured, and how big a capture is.

    .venv/bin/python bench/forensics.py                  # every scenario 3 times (~6 minutes here)
    .venv/bin/python bench/forensics.py --quick          # block and longer once each (~1 minute)

A real root and agent (processes), and tests/forensics_job.py under torchrun (gloo, CPU, --world ranks),
whose rank 2 misbehaves at step 10 (`block`: blocks forever in its data loading; `stop`: SIGSTOPs itself;
`longer`: all-reduces a longer tensor; `skip`: skips one all-reduce). Per run it records:

* fault -> event: from the moment the job printed the fault (its own clock; the same host) to the root
  opening the event that names rank 2 (hang for block/stop, whose rule waits --hang-after seconds without
  progress first; collective_mismatch for longer/skip);
* event -> capture stored (hang events): from the root asking (right after the event opened) to rank 2's
  capture being on the root's disk, and the capture's source and size in bytes (its protobuf);
* whether the event named rank 2 and only it.

Prints a table and writes bench/results/forensics.json (--out). The heartbeat's cost of the fingerprints is
measured by bench/sdk_overhead.py (bench/arrival_cost.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

# bench/ is this script's folder (first on sys.path): its neighbours import as they are
from machine import REPO, cpu_model, git_head, memory_bytes

sys.path.insert(0, str(REPO))  # the checkout: when run as a script only bench/ is on sys.path

from bench.torchrun_jobs import root_and_agent, torchrun
from collectors.demo.train import kill_job

JOB = REPO / "tests" / "forensics_job.py"
SCENARIOS = {"block": "hang", "stop": "hang", "longer": "collective_mismatch", "skip": "collective_mismatch"}


def api_get(api: str, path: str) -> Any:
    try:
        with urllib.request.urlopen(f"http://{api}{path}", timeout=10) as reply:
            return json.load(reply)
    except OSError:
        return None


def one_run(api: str, agent: str, workdir: Path, scenario: str, index: int, world: int,
            timeout_s: float) -> dict[str, Any]:
    job = f"fx-{scenario}-{index}"
    log = workdir / f"{job}.log"
    proc = torchrun(world, JOB, ["--job", job, "--fault", scenario, "--fault-rank", "2", "--fault-step", "10"],
                    agent, log)
    kind = SCENARIOS[scenario]
    result: dict[str, Any] = {"scenario": scenario, "job": job, "kind": kind}
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            time.sleep(0.2)
            events = (api_get(api, f"/api/v1/jobs/{job}/events?kind={kind}") or {}).get("events") or []
            event = next((e for e in events if 2 in e["ranks"]), None)
            if event is None:
                continue
            result.update(event_id=event["id"], ranks=event["ranks"], opened=event["time"])
            if kind != "hang":
                break
            body = api_get(api, f"/api/v1/jobs/{job}/events/{event['id']}/forensics") or {}
            capture = next((c for c in body.get("captures", []) if c["rank"] == 2), None)
            if capture is not None:
                result.update(asked_at=body["asked_at"], source=capture["source"], bytes=capture["bytes"],
                              capture_s=capture["seconds_to_store"],
                              stacks_bytes=len(capture["stacks"]), shows_loader="load_batch" in capture["stacks"])
                break
    finally:
        kill_job(proc, job)
    fault = next((json.loads(line) for line in log.read_text(errors="replace").splitlines()
                  if line.startswith('{"event": "fault"')), None)
    if fault is not None and "opened" in result:
        opened = result.get("asked_at", result["opened"]) if kind == "hang" else result["opened"]
        result["fault_to_event_s"] = round(opened - fault["time"], 3)
    result["named_exactly"] = result.get("ranks") == [2]
    result["complete"] = "ranks" in result and (kind != "hang" or "capture_s" in result)
    return result


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for scenario in SCENARIOS:
        mine = [r for r in runs if r["scenario"] == scenario]
        if not mine:
            continue

        def med(key: str) -> float | None:
            values = [r[key] for r in mine if r.get(key) is not None]
            return round(statistics.median(values), 3) if values else None
        out[scenario] = {"runs": len(mine), "complete": sum(r["complete"] for r in mine),
                         "named_exactly": sum(r["named_exactly"] for r in mine),
                         "fault_to_event_s_median": med("fault_to_event_s"),
                         "fault_to_event_s_max": max((r["fault_to_event_s"] for r in mine
                                                      if r.get("fault_to_event_s") is not None), default=None),
                         "capture_s_median": med("capture_s"), "capture_bytes_median": med("bytes"),
                         "sources": sorted({r["source"] for r in mine if r.get("source")})}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3, help="runs per scenario [default: 3]")
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated, of " + ", ".join(SCENARIOS))
    p.add_argument("--world", type=int, default=3, help="ranks per job (rank 2 is the culprit) [default: 3]")
    p.add_argument("--hang-after", type=float, default=4.0,
                   help="the root's hang rule: seconds without progress (production default 60) [default: 4]")
    p.add_argument("--timeout", type=float, default=90.0, help="give a run up after this long [default: 90 s]")
    p.add_argument("--quick", action="store_true", help="block and longer, once each")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results", help="folder for forensics.json")
    args = p.parse_args()
    scenarios = ["block", "longer"] if args.quick else [s for s in args.scenarios.split(",") if s]
    unknown = set(scenarios) - set(SCENARIOS)
    if unknown or args.repeats < 1 or args.world < 3:
        p.error(f"unknown scenario(s) {sorted(unknown)}" if unknown else "need --repeats >= 1 and --world >= 3")
    repeats = 1 if args.quick else args.repeats
    detectors = json.dumps({"hang": {"no_progress_floor_s": args.hang_after, "check_interval_s": 0.25}})
    runs: list[dict[str, Any]] = []
    started = time.monotonic()
    load_before = os.getloadavg()
    with (tempfile.TemporaryDirectory(prefix="bench-forensics-") as tmp,
          root_and_agent(Path(tmp), root_args=("--detectors", detectors),
                         agent_args=("--stuck-after", "3", "--capture-timeout", "2")) as tree):
        for i in range(repeats):
            for scenario in scenarios:
                print(f"[{time.monotonic() - started:6.1f} s] {scenario} #{i + 1}", file=sys.stderr, flush=True)
                runs.append(one_run(tree["api"], tree["agent"], tree["tmp"], scenario, i, args.world, args.timeout))
    summary = summarise(runs)
    print("\n| scenario | runs | named rank 2 only | fault -> event s (median / max) | event -> capture stored s | "
          "capture bytes | capture source |\n|---|---|---|---|---|---|---|")
    for scenario, s in summary.items():
        print(f"| {scenario} | {s['runs']} | {s['named_exactly']} | {s['fault_to_event_s_median']} / "
              f"{s['fault_to_event_s_max']} | {s['capture_s_median'] if s['capture_s_median'] is not None else '-'} | "
              f"{s['capture_bytes_median'] if s['capture_bytes_median'] is not None else '-'} | "
              f"{', '.join(s['sources']) or '-'} |")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "forensics.json"
    path.write_text(json.dumps({"benchmark": "forensics", "git_head": git_head(), "cpu": cpu_model(),
                                "memory_bytes": memory_bytes(), "quick": args.quick, "world": args.world,
                                "hang_after_s": args.hang_after, "summary": summary, "runs": runs,
                                "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
                                "run_time_s": round(time.monotonic() - started, 1)}, indent=1))
    print(f"\nwrote {path}")
    return 0 if all(r["complete"] for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
