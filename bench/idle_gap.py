#!/usr/bin/env python
"""What an idle gap before a unit costs the unit's decode on this machine (issue 29: why spread arrival costs a rack
twice the burst).

    python bench/idle_gap.py [--metrics 300] [--gaps 0,0.001,0.005,0.015] [--reps 3] [--rounds 2] [--busy]
                             [--out bench/results]

Why: bench/rack_arrival.py measures a rack at about twice its burst CPU when the same 64 units come spread over a
second, in the same functions (docs/scale.md). This takes the rack, gRPC and every thread out: one thread decodes a
rack child's unit (bench/tier_cost.py's, 300 windows; `read_native_unit`, the rack's first native call on a unit)
64 times per block, either back to back (gap 0) or after sleeping `gap` seconds before each, and times each decode by
its thread CPU. Same bytes, same code, same thread: what the gap changes is the state the machine leaves the thread's
caches (and core) in. Gaps are interleaved within each round. --busy runs the same with one nice-19 spinning process
per CPU beside it, so that no CPU goes idle while this thread sleeps (the rack's CPU in bench/rack_arrival.py is
measured without them). Prints the median and mean decode per gap and writes idle_gap.json under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout: when run as a script
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import REPO, git_head, machine_facts
from tier_cost import build_units

SPIN = "import os; os.nice(19)\nwhile True: pass"


def decode_times(units: list[bytes], gap: float, reps: int) -> list[float]:
    """Each unit's decode, in microseconds of this thread's CPU, `reps` passes over `units`, after `gap` s of sleep."""
    from collectors.collector.service import MAX_ATTEMPT, MAX_INDEX
    from telemetry.summary.summary import read_native_unit

    out = []
    for _ in range(reps):
        for data in units:
            if gap:
                time.sleep(gap)
            t0 = time.thread_time_ns()
            unit = read_native_unit(data, MAX_INDEX, MAX_ATTEMPT, 1 << 20)
            out.append((time.thread_time_ns() - t0) / 1e3)
            del unit
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--metrics", type=int, default=300, help="windows per unit (one per metric)")
    p.add_argument("--children", type=int, default=64, help="units per pass (a rack's children)")
    p.add_argument("--gaps", default="0,0.001,0.005,0.015", help="seconds slept before each decode")
    p.add_argument("--reps", type=int, default=3, help="passes over the units per gap and round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--busy", action="store_true", help="one nice-19 spinner per CPU beside it, all the while")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args(argv)
    try:
        gaps = [float(g) for g in args.gaps.split(",")]
    except ValueError:
        p.error(f"--gaps: comma-separated seconds, got {args.gaps!r}")
    if any(g < 0 for g in gaps) or args.reps < 1 or args.rounds < 1 or args.metrics < 1 or args.children < 1:
        p.error("--gaps must be >= 0; --reps, --rounds, --metrics and --children >= 1")
    units = build_units(args.children, 8, args.metrics, 1)[0]
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(os.cpu_count() or 1)] if args.busy else []
    samples: dict[float, list[float]] = {g: [] for g in gaps}
    try:
        decode_times(units, 0.0, 1)  # warm-up: the module loaded, the allocator grown
        for rnd in range(args.rounds):
            for gap in gaps:
                times = decode_times(units, gap, args.reps)
                samples[gap] += times
                print(f"round {rnd + 1} gap {gap * 1e3:g} ms: median {statistics.median(times):.0f} us, "
                      f"mean {statistics.fmean(times):.0f} us ({len(times)} decodes; load "
                      f"{os.getloadavg()[0]:.1f})", flush=True)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    base = statistics.median(samples[gaps[0]])
    rows: list[dict[str, Any]] = []
    print(f"\n{'gap ms':>7} {'median us':>10} {'mean us':>8} {'x first gap':>12}")
    for gap in gaps:
        median = statistics.median(samples[gap])
        rows.append({"gap_s": gap, "median_us": median, "mean_us": statistics.fmean(samples[gap]),
                     "p90_us": statistics.quantiles(samples[gap], n=10)[-1], "decodes": len(samples[gap]),
                     "ratio_to_first_gap": median / base})
        print(f"{gap * 1e3:>7g} {median:>10.0f} {rows[-1]['mean_us']:>8.0f} {median / base:>12.2f}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "idle_gap.json"
    path.write_text(json.dumps({"benchmark": "idle_gap", "machine": machine_facts(), "commit": git_head(),
                                "config": {k: str(v) for k, v in vars(args).items()}, "rows": rows,
                                "loadavg_end": os.getloadavg()[0]}, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
