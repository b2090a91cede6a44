#!/usr/bin/env python
"""The rack's CPU per step against how its children's units arrive: one burst, or spread over the step (issue 29).

    python bench/rack_arrival.py [--metrics 300] [--spreads 0,1,3] [--groups 1,8] [--steps 4] [--rounds 2]
                                 [--out bench/results]

Why: the same rack (64 agents x 300 metrics) costs ~85-120 ms of CPU a step in bench/tier_cost.py, whose children send
their units in one burst, and ~130-250 ms in bench/scale.py's full simulation, whose 64 agents are fed one after the
other, so that their units reach the rack one at a time over the whole step (1-10 s). This bench holds everything but
the arrival fixed: a real rack under a real root (bench/tier_cost.py's processes), its 64 children's pre-built units
(the same bytes every shape), sent on real Forward streams either at once (spread 0) or spread evenly over `spread`
seconds, `group` units at a time; closed loop (a step ends when every child holds the root's DURABLE ack of it). The
shapes are interleaved within each round. Per shape and round: the rack's CPU per step (every thread; net of its idle
rate too), its own code (bench/scale.py's accounting), the units, windows and bytes it was handed per step (the same
in every shape, or the comparison is void), and each of its threads' CPU and context switches per step, named by the
rack's Python threads. Writes rack_arrival.json under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout: when run as a script

REPO = Path(__file__).resolve().parent.parent
TICK = os.sysconf("SC_CLK_TCK")


def threads_of(pid: int) -> dict[int, tuple[float, int, int, int]]:
    """Each thread of `pid`: (CPU seconds, voluntary and involuntary context switches, minor page faults), from
    /proc."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            switches = {k: int(v) for k, v in (line.split(":") for line in
                                               Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines()
                                               if line.startswith(("voluntary_ctxt", "nonvoluntary_ctxt")))}
        except OSError:  # a thread that ended meanwhile
            continue
        out[int(tid)] = ((int(stat[11]) + int(stat[12])) / TICK, switches.get("voluntary_ctxt_switches", 0),
                         switches.get("nonvoluntary_ctxt_switches", 0), int(stat[7]))
    return out


def per_thread(before: dict, after: dict, names: dict[str, str], steps: int) -> list[dict[str, Any]]:
    rows = []
    for tid, (cpu, vol, invol, faults) in after.items():
        cpu0, vol0, invol0, faults0 = before.get(tid, (0.0, 0, 0, 0))
        rows.append({"thread": names.get(str(tid), f"tid {tid} (not a Python thread)"),
                     "cpu_ms_per_step": (cpu - cpu0) / steps * 1e3, "woken_per_step": (vol - vol0) / steps,
                     "preempted_per_step": (invol - invol0) / steps, "minor_faults_per_step": (faults - faults0) / steps})
    return sorted((r for r in rows if r["cpu_ms_per_step"] or r["woken_per_step"] >= 1),
                  key=lambda r: -r["cpu_ms_per_step"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--metrics", type=int, default=300)
    p.add_argument("--children", type=int, default=64)
    p.add_argument("--spreads", default="0,1,3", help="seconds over which a step's units are sent (0: at once)")
    p.add_argument("--groups", default="1", help="units sent together at each point of a spread step")
    p.add_argument("--steps", type=int, default=4, help="measured steps per shape and round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--idle-s", type=float, default=2.0)
    p.add_argument("--step-timeout", type=float, default=300.0)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args(argv)
    os.environ["TELEMETRY_SCALE_METRICS"] = str(args.metrics)  # the tiers' per-job metric budget admits them all
    from bench.scale_child import Child, kill_all
    from bench.tier_cost import Sender, build_units

    shapes = [(float(s), int(g)) for s in args.spreads.split(",") for g in args.groups.split(",")
              if float(s) > 0 or g == args.groups.split(",")[0]]  # a burst is one shape whatever the group
    steps_total = 1 + args.steps * len(shapes) * args.rounds
    t0 = time.monotonic()
    units = build_units(args.children, 8, args.metrics, steps_total)
    print(f"built {steps_total} steps of {args.children} units in {time.monotonic() - t0:.0f} s", flush=True)
    work = Path(tempfile.mkdtemp(prefix="rack_arrival_"))
    procs: list[Child] = []
    senders: list[Sender] = []
    results: list[dict[str, Any]] = []
    try:
        root = Child("root", "collector", {"id": "root", "parents": [], "db": str(work / "root.db"),
                                           "deadline_floor": 120.0}, work)
        procs.append(root)
        rack = Child("rack", "collector", {"id": "rack", "parents": [root.wait_ready()["address"]], "db": "",
                                           "deadline_floor": 120.0}, work)
        procs.append(rack)
        address = rack.wait_ready()["address"]
        senders = [Sender(address, f"child-{c}") for c in range(args.children)]

        def step(i: int, spread: float, group: int) -> None:
            start, points = time.monotonic(), max(1, -(-args.children // group) - 1)
            for c, sender in enumerate(senders):
                wait = start + spread * (c // group) / points - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                sender.send(units[i][c])
            for sender in senders:
                sender.wait_durable(i + 1, args.step_timeout)

        step(0, 0.0, 1)  # warm-up
        cpu0 = sum(rack.cpu_jiffies())  # seconds (bench/procstat.py)
        time.sleep(args.idle_s)
        idle_per_s = (sum(rack.cpu_jiffies()) - cpu0) / args.idle_s
        names = rack.ask({"cmd": "threads"})["threads"]
        i = 1
        for rnd in range(args.rounds):
            for spread, group in shapes:
                stats0 = rack.ask({"cmd": "stats"})["stats"]
                before, cpu0, wall0 = threads_of(rack.pid), sum(rack.cpu_jiffies()), time.monotonic()
                for _ in range(args.steps):
                    step(i, spread, group)
                    i += 1
                wall, cpu = time.monotonic() - wall0, sum(rack.cpu_jiffies()) - cpu0
                threads = per_thread(before, threads_of(rack.pid), names, args.steps)
                stats1 = rack.ask({"cmd": "stats"})["stats"]
                n = args.steps
                row = {"spread_s": spread, "group": group, "round": rnd + 1, "cpu_ms_per_step": cpu / n * 1e3,
                       "net_cpu_ms_per_step": (cpu - idle_per_s * wall) / n * 1e3,
                       "own_code_ms_per_step": (stats1["step_work_s"] - stats0["step_work_s"]) / n * 1e3,
                       "wall_ms_per_step": wall / n * 1e3, "idle_cpu_ms_per_s": idle_per_s * 1e3,
                       **{f"{k}_per_step": (stats1[k] - stats0[k]) / n for k in ("batches", "windows", "bytes")},
                       "threads": threads, "load_1min": os.getloadavg()[0]}
                results.append(row)
                top = ", ".join(f"{t['thread']} {t['cpu_ms_per_step']:.0f} ms ({t['woken_per_step']:.0f} wake-ups, "
                                f"{t['minor_faults_per_step']:.0f} faults)" for t in threads[:3])
                print(f"round {rnd + 1} spread {spread:g} s, {group} at a time: {row['cpu_ms_per_step']:.1f} ms CPU/step "
                      f"(net {row['net_cpu_ms_per_step']:.1f}, own code {row['own_code_ms_per_step']:.1f}), "
                      f"{row['batches_per_step']:.0f} units, {row['windows_per_step']:.0f} windows, "
                      f"{row['bytes_per_step'] / 1e6:.2f} MB a step; {top}; load {row['load_1min']:.1f}", flush=True)
    finally:
        for sender in senders:
            sender.close()
        kill_all(procs)
        shutil.rmtree(work, ignore_errors=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "rack_arrival.json"
    path.write_text(json.dumps({"argv": sys.argv[1:], "git_commit": commit, "results": results}, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
