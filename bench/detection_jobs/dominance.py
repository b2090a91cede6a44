"""Which clean stretches of the recorded straggler matrix no per-step rule can tell from a straggler named in time.

    python bench/detection_jobs/dominance.py RESULT.json [RESULT.json ...]

RESULT.json is what `bench/detection.py --matrix` writes. For every 2x and 1.5x cell that today's rule
(replayed: replay_matrix.py) names exactly and within the issue's bound, and whose slow rank waited least on
every step from the fault to the bound (onset .. onset + 3 steps at 2x, + 5 at 1.5x), its evidence per step x
= (p50 - min) / step of `collective_wait`. A clean stretch - a clean run, or the steps before a fault -
*dominates* that cell when, after the start-up steps (`wait_warmup`), one rank waited least on as many steps in a row with at least the cell's evidence
on each. A rule that reads the per-step evidence (the least-waiting rank and x) and names a rank no later
for more evidence must name it there too, by the same step of the stretch: each clean run holding such a
stretch costs at least one false alarm to any such rule that keeps the cell in time. Prints the stretches
and the count of runs holding one. (Runs recorded with each rank's run-queue wait: runqueue.py counts them
again with the part of the lead it explains discounted, as the rule does now.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: when run as a script only its folder is on sys.path

from bench.detection_jobs import matrix
from bench.detection_jobs.replay_matrix import replay_run
from bench.recordings import read_json
from collectors.detectors.straggler import StragglerConfig

WARMUP = StragglerConfig().wait_warmup  # a job's first steps are start-up: no rule judges them


def evidence(run: dict[str, Any]) -> dict[int, tuple[int, float]]:
    """Per step: the least-waiting rank and its evidence, as the rule computes it (over the step's length, never
    less than its longest wait)."""
    out = {}
    for step, least, low, p50, _count, step_p50, *rest in run["waits"]:
        if step_p50 is None:
            continue
        scale = max(step_p50, rest[0] if rest and rest[0] is not None else 0.0)
        out[step] = (least, (p50 - low) / scale if scale > 0 else 0.0)
    return out


def in_time_cells(runs: list[dict[str, Any]]) -> list[tuple[str, list[float]]]:
    """The 2x and 1.5x cells named exactly in time whose slow rank waited least on every step to the bound, with
    the evidence of those steps."""
    cells = []
    for run in runs:
        if run["factor"] < 1.5 or not run.get("truth"):
            continue
        det = matrix.score_cell(replay_run(run, {})).get("detection") or {}
        if not det.get("in_time"):
            continue
        x, onset, rank = evidence(run), run["truth"]["step"], run["truth"]["rank"]
        steps = range(onset, onset + matrix.WITHIN[run["factor"]] + 1)
        if all(s in x and x[s][0] == rank for s in steps):
            cells.append((run["cell"], [x[s][1] for s in steps]))
    return cells


def dominating(run: dict[str, Any], cells: list[tuple[str, list[float]]]) -> tuple[str, int, int] | None:
    """The first (cell, first step, rank) of a clean stretch of `run` that dominates one of `cells`."""
    x = evidence(run)
    end = run["truth"]["step"] if run["factor"] and run.get("truth") else None
    steps = [s for s in sorted(x) if s >= WARMUP and (end is None or s < end)]
    for cell, seq in cells:
        for i in range(len(steps) - len(seq) + 1):
            window = steps[i:i + len(seq)]
            rank = x[window[0]][0]
            if window[-1] - window[0] == len(seq) - 1 and all(
                    x[s][0] == rank and x[s][1] >= v for s, v in zip(window, seq)):
                return cell, window[0], rank
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, nargs="+", help="detection_matrix.json files (or .json.gz)")
    args = p.parse_args(argv)
    runs = [run for path in args.results for run in read_json(path)["runs"] if run.get("waits")]
    cells = in_time_cells(runs)
    print(f"{len(cells)} cells named in time whose slow rank waited least on every step to the bound")
    held = 0
    for run in runs:
        found = dominating(run, cells)
        if found is not None:
            held += 1
            print(f"  {run['cell']} ({run['job']}): rank {found[2]} from step {found[1]} dominates {found[0]}")
    print(f"{held} of {len(runs)} runs hold a clean stretch that dominates a cell named in time")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
