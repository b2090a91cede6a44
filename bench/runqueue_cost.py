#!/usr/bin/env python
"""What the SDK's run-queue wait and on-CPU time cost a step (telemetry/sdk/runqueue.py): two reads of the step
thread's /proc/thread-self/schedstat per step, both figures from each read.

    python bench/runqueue_cost.py [--reads 200000] [--out bench/results]

Measures, in one run and interleaved in rounds (this machine is shared: a ratio measured together is what
counts), the seconds of one RunQueueClock.read_both_ns() on its open descriptor (what a step reads at its entry
and exit: the run-queue wait and the on-CPU time), of one read_ns() (the run-queue wait alone, what a step read
before it logged `oncpu_time`), of one open+read+close of the file
(what a reader without a kept descriptor would pay), and of one time.perf_counter_ns() (the floor any step
timing pays), then the cost per step (two reads of both figures) as a share of a 10 ms and a 100 ms step, and
both figures' read over the run-queue wait's alone. Writes runqueue_cost.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout

from bench.harness import write_json
from bench.machine import machine_facts
from telemetry.sdk.runqueue import PATH, RunQueueClock


def per_call(fn: Callable[[], object], n: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - start) / n / 1e3  # us


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reads", type=int, default=200_000, help="reads per kind in all (default 200,000)")
    p.add_argument("--rounds", type=int, default=20, help="interleaved rounds (default 20)")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = p.parse_args(argv)
    if args.reads < args.rounds or args.rounds < 1:
        p.error("--reads must be at least --rounds, and --rounds at least 1")
    clock = RunQueueClock()
    if clock.read_ns() is None:
        print(f"{PATH} is not readable here: the SDK logs no runqueue_wait on this kernel", file=sys.stderr)
        return 1

    def fresh() -> int:
        with open(PATH, "rb") as f:
            return int(f.read().split()[1])

    kinds = {"read_both_ns (kept descriptor)": clock.read_both_ns, "read_ns (run-queue wait only)": clock.read_ns,
             "open+read+close": fresh,
             "perf_counter_ns (floor)": time.perf_counter_ns}
    n = args.reads // args.rounds
    rounds: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(args.rounds):
        for name, fn in kinds.items():
            rounds[name].append(per_call(fn, n))
    us = {name: statistics.median(v) for name, v in rounds.items()}
    read = us["read_both_ns (kept descriptor)"]
    result = {"benchmark": "runqueue_cost", "machine": machine_facts(), "reads": n * args.rounds,
              "rounds": args.rounds, "us_per_call_median": {k: round(v, 3) for k, v in us.items()},
              "us_per_step": round(2 * read, 3),
              "share_of_step": {"10ms": round(2 * read / 10_000, 6), "100ms": round(2 * read / 100_000, 6)},
              "read_vs_open_each_time": round(read / us["open+read+close"], 3),
              "both_vs_runqueue_only": round(read / us["read_ns (run-queue wait only)"], 3)}
    for name, value in us.items():
        print(f"{name:28s} {value:8.2f} us per call (median of {args.rounds} rounds of {n})")
    print(f"per step (two reads): {2 * read:.2f} us = {2 * read / 10_000:.3%} of a 10 ms step, "
          f"{2 * read / 100_000:.4%} of a 100 ms step; kept descriptor / open each time = "
          f"{result['read_vs_open_each_time']:.2f}; both figures / run-queue wait only = "
          f"{result['both_vs_runqueue_only']:.3f}")
    write_json(args.out / "runqueue_cost.json", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
