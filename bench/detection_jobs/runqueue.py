"""Does the run-queue wait explain the clean stretches that look like stragglers?

    python bench/detection_jobs/runqueue.py RESULT.json [RESULT.json ...] [--against TUNING.json ...]

RESULT.json is what `bench/detection.py --matrix` writes, from runs that recorded each rank's
`collective_wait` and `runqueue_wait` (`per_rank`: the SDK's step-thread run-queue wait, and every thread's,
`bench.runqueue_threads`). Per step the least-waiting rank A leads the median rank by gap = p50 - wait(A);
its *excess run-queue wait* is rq(A) - p50(rq) (how much longer it sat runnable but not running than the
median rank). The straggler rule discounts it: gap' = max(0, gap - excess), evidence x = gap / step.

Prints, over the clean steps (clean runs, and fault runs before the fault) after the start-up steps:

- how much of the lead is explained: over the steps whose evidence x reaches the fast lane's reference
  (`wait_fast_drift`, the steps that feed a false alarm), the summed excess / summed gap, for the step
  thread's run-queue wait and for every thread's;
- the same for the fault runs' slow rank after the fault (a sleep: the share explained should be ~0, or the
  discount would hide a real straggler);
- dominance.py's count of clean stretches that dominate a straggler named in time, before and after the
  discount (the cells are those of the runs given, or of --against).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: when run as a script only its folder is on sys.path

from bench.detection_jobs import dominance
from bench.recordings import read_json
from collectors.detectors.straggler import StragglerConfig

WARMUP = StragglerConfig().wait_warmup
DRIFT = StragglerConfig().wait_fast_drift
SIGNALS = ("step thread", "every thread")


def per_step(run: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Per step with every rank's figures: the least-waiting rank, its gap, the step's scale, and its excess
    run-queue wait (step thread, every thread)."""
    scale_of = {w[0]: max(w[5] or 0.0, w[6] or 0.0) for w in run["waits"]}
    out = {}
    for step, waits, rq, rq_all, *_ in run.get("per_rank", []):
        if len(waits) < run["world"] or scale_of.get(step, 0.0) <= 0:
            continue
        ranks = sorted(waits, key=lambda r: (waits[r], int(r)))
        least = ranks[0]
        gap = statistics.median(waits.values()) - waits[least]
        excess = []
        for figures in (rq, rq_all):
            if len(figures) < run["world"]:
                excess.append(None)
                continue
            excess.append(max(0.0, figures[least] - statistics.median(figures.values())))
        out[step] = {"least": int(least), "gap": gap, "scale": scale_of[step], "excess": excess}
    return out


def clean_steps(run: dict[str, Any]) -> range:
    end = run["truth"]["step"] if run["factor"] and run.get("truth") else run["steps_done"]
    return range(WARMUP, end)


def discounted(run: dict[str, Any], signal: int) -> dict[str, Any]:
    """The run with each step's least wait raised by the excess run-queue wait of its least-waiting rank
    (`waits`' min = p50 - gap'), as the discounting rule would see it."""
    steps = per_step(run)
    waits = []
    for w in run["waits"]:
        got = steps.get(w[0])
        if got is not None and got["least"] == w[1] and got["excess"][signal] is not None:
            w = list(w)
            w[2] = max(w[2], w[3] - max(0.0, got["gap"] - got["excess"][signal]))
        waits.append(w)
    return {**run, "waits": waits}


def explained(runs: list[dict[str, Any]], clean: bool) -> list[tuple[float, float, int]]:
    """Per signal: (summed excess, summed gap, steps) over the steps whose evidence reaches the fast reference:
    clean steps (clean) or the slow rank's steps after the fault (not clean)."""
    totals = [[0.0, 0.0, 0] for _ in SIGNALS]
    for run in runs:
        steps = per_step(run)
        if clean:
            wanted = clean_steps(run)
            rank = None
        elif run["factor"] and run.get("truth"):
            wanted = range(run["truth"]["step"], run["steps_done"])
            rank = run["truth"]["rank"]
        else:
            continue
        for step in wanted:
            got = steps.get(step)
            if got is None or got["gap"] / got["scale"] < DRIFT or (rank is not None and got["least"] != rank):
                continue
            for i, excess in enumerate(got["excess"]):
                if excess is not None:
                    totals[i][0] += min(excess, got["gap"])
                    totals[i][1] += got["gap"]
                    totals[i][2] += 1
    return [(a, b, int(n)) for a, b, n in totals]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, nargs="+", help="detection_matrix.json files (or .json.gz) with per_rank figures")
    p.add_argument("--against", type=Path, nargs="*", default=[],
                   help="detection_matrix.json files (or .json.gz) whose cells named in time the stretches are held against "
                        "(default: the runs given)")
    args = p.parse_args(argv)
    runs = [run for path in args.results for run in read_json(path)["runs"] if run.get("per_rank")]
    if not runs:
        print("no run recorded per-rank figures (record with this checkout's bench/detection.py --matrix)")
        return 1
    against = [run for path in args.against for run in read_json(path)["runs"] if run.get("waits")]
    cells = dominance.in_time_cells(against or runs)
    n_clean = sum(len(clean_steps(r)) for r in runs)
    print(f"{len(runs)} runs, {n_clean} clean steps after start-up; {len(cells)} cells named in time to hold against")
    for clean, what in ((True, "clean steps whose evidence reaches the fast reference"),
                        (False, "the slow rank's steps after the fault")):
        for name, (excess, gap, n) in zip(SIGNALS, explained(runs, clean)):
            share = f"{excess / gap:.0%}" if gap > 0 else "-"
            print(f"  {what}: {n} steps; run-queue wait ({name}) explains {share} of the lead "
                  f"({excess:.2f} s of {gap:.2f} s)")
    for label, view in (("as recorded", lambda r: r), ("discounted (step thread)", lambda r: discounted(r, 0)),
                        ("discounted (every thread)", lambda r: discounted(r, 1))):
        held = [(r, found) for r in runs if (found := dominance.dominating(view(r), cells)) is not None]
        print(f"  {label}: {len(held)} of {len(runs)} runs hold a clean stretch that dominates a cell named in time")
        for run, (cell, step, rank) in held:
            print(f"    {run['cell']} ({run['job']}): rank {rank} from step {step} dominates {cell}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
