#!/usr/bin/env python
"""The straggler rule at 16,384 ranks (issue 24): the simulator's ranks, the root's detector, no tree.

    python bench/straggler_scale.py [--ranks 16384] [--steps 160] [--factors 2,1.5,1.2,1.1] [--out bench/results]

Per step, every rank's figures come from `telemetry sim`'s own model (collectors/sim/model.py `RankModel`:
log-normal compute noise, sigma 5 %, synchronous collectives, `collective_wait` = the slowest rank's extra
compute + the transfer); the step's `collective_wait` and `step_time` windows are the exact Summaries the
tree would merge (built here in one piece: merging is exact for count/min/argmin), fed to the root's
StragglerDetector in order. One run per factor, the straggler from step 40 on a rank in the middle of the
world, plus one clean run. Prints, per run: the step the rank was named at, the rank named, false alarms,
and the largest number of candidate ranks the rule kept (its state: O(k), not O(ranks)); writes
straggler_scale.json (with each run's per-step trace: the least-waiting rank, the evidence, the slow
rank's score) and, with --plot, straggler_scale_RANKS.png. The full process tree at this size is bench/scale.py's (docs/scale.md); this bench
isolates the rule, as the tree delivers it exact.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from harness import apply_quick, parser, write_result
from machine import REPO, machine_facts

sys.path.insert(0, str(REPO))

from collectors.common.keys import Key
from collectors.common.rows import Row
from collectors.detectors import EventLog
from collectors.detectors.straggler import StragglerDetector
from collectors.sim.model import RankModel, parse_injection
from telemetry.names import WAIT_METRIC
from telemetry.summary import Summary

QUICK = {"ranks": 1024, "steps": 120}
ONSET = 40


def one_run(ranks: int, steps: int, factor: float, seed: int) -> dict[str, Any]:
    slow = ranks // 2 + 1
    injections = [parse_injection(f"straggler:rank={slow},from={ONSET},factor={factor}")] if factor > 1 else []
    models = [RankModel(r, seed, injections, ranks) for r in range(ranks)]
    log = EventLog(None)
    det = StragglerDetector(log)
    sources = np.arange(ranks, dtype=np.int64)
    tracked, started = 0, time.perf_counter()
    trace = []  # per step: the least-waiting rank, the evidence, the slow rank's ratio (1 names it)
    for step in range(steps):
        values = [m.values(step) for m in models]
        for metric in ("step_time", WAIT_METRIC):
            column = np.fromiter((v[metric] for v in values), dtype=np.float64, count=ranks)
            summary = Summary.from_arrays(column, sources, time.time_ns())
            det.observe(Row(Key("scale", metric, step, 0), ranks, summary, 0, time.time_ns()))
        score = det.state("scale").score
        if score is not None:
            tracked = max(tracked, max(len(lane.scores) for lane in score.lanes))
            least = summary.argmin
            x = score.evidence(max(0.0, summary.quantile(0.5) - summary.min), det.state("scale").step_scale)
            trace.append([step, least, round(x, 4), round(score.ratio(slow), 4)])
    events = log.query("scale")
    after = [e for e in events if e["detail"]["detected_step"] >= ONSET]
    named = after[0] if after and factor > 1 else None
    return {"factor": factor, "ranks": ranks, "steps": steps, "slow_rank": slow if factor > 1 else None,
            "named_rank": named["ranks"] if named else None,
            "delay_steps": named["detail"]["detected_step"] - ONSET if named else None,
            "false_alarms": len(events) - (1 if named else 0),
            "max_tracked_ranks": tracked, "seconds": round(time.perf_counter() - started, 1), "trace": trace}


def plot(path: Path, runs: list[dict[str, Any]]) -> None:
    """Per run, the slow rank's score (1 names it) and whether it waited least, step by step."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for i, run in enumerate(runs):
        steps = [s for s, _, _, _ in run["trace"]]
        label = (f"{run['factor']:g}x rank {run['slow_rank']}" if run["slow_rank"] is not None
                 else f"clean: rank {runs[0]['slow_rank']}'s score")
        ax.plot(steps, [r for *_, r in run["trace"]], color=f"C{i}", label=label)
        least = [s for s, rank, _, _ in run["trace"] if run["slow_rank"] is not None and rank == run["slow_rank"]]
        ax.plot(least, [-0.08 - 0.06 * i] * len(least), "|", color=f"C{i}", markersize=6)
        if run["delay_steps"] is not None:
            ax.axvline(ONSET + run["delay_steps"], color=f"C{i}", linestyle=":", linewidth=1)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
    ax.axvline(ONSET, color="black", linewidth=0.8)
    ax.annotate("onset", xy=(ONSET, 1.9), fontsize=8)
    ax.set_xlabel("step")
    ax.set_ylabel("slow rank's score / threshold")
    ax.set_ylim(-0.1 - 0.06 * len(runs), 2.1)
    ax.set_title(f"straggler rule at {runs[0]['ranks']:,} simulated ranks (ticks: steps the slow rank waited least; "
                 "dotted: named)", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, "straggler_scale", QUICK)
    p.add_argument("--ranks", type=int, default=16_384)
    p.add_argument("--steps", type=int, default=160)
    p.add_argument("--factors", default="2,1.5,1.2,1.1", help="the straggler's compute factor per run (plus a clean run)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", action="store_true", help="also draw straggler_scale_RANKS.png (matplotlib)")
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    apply_quick(args, argv, QUICK)
    if args.ranks < 2 or args.steps <= ONSET:
        p.error(f"--ranks must be >= 2 and --steps > {ONSET}")
    runs = []
    for factor in [float(f) for f in args.factors.split(",")] + [1.0]:
        run = one_run(args.ranks, args.steps, factor, args.seed)
        print(f"{args.ranks} ranks, factor {factor:g}: named {run['named_rank']} (truth {run['slow_rank']}) "
              f"{run['delay_steps']} steps after the onset; false alarms {run['false_alarms']}; "
              f"candidates kept <= {run['max_tracked_ranks']} ({run['seconds']} s)", flush=True)
        runs.append(run)
    result = {"benchmark": "straggler_scale", "complete": True, "machine": machine_facts(), "config": vars(args)
              | {"out": str(args.out)}, "runs": runs}
    if args.plot:
        figure = Path(args.out) / f"straggler_scale_{args.ranks}.png"
        plot(figure, runs)
        print(f"wrote {figure}")
    return write_result(args.out, "straggler_scale", result, "straggler scale bench")


if __name__ == "__main__":
    raise SystemExit(main())
