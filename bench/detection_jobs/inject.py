"""Stragglers injected into the real noise of recorded clean runs, replayed through the straggler rule.

    python bench/detection_jobs/inject.py RESULT.json [RESULT.json ...] [--detectors JSON ...] [--onsets 40,150]
        [--shapes tp] [--factors 1.2] [--every-rank] [--cells]

RESULT.json is what `bench/detection.py --matrix` writes, with each rank's figures per step (`per_rank`:
`collective_wait` and `runqueue_wait`). Each clean run is cut at every onset of --onsets into a cell per
severity (2x, 1.5x, 1.2x, 1.1x; the run must hold the matrix's steps after the onset), one rank (rotating)
made f times slower the way bench/detection_jobs/shapes.py slows it: (f - 1) x the median step before the
onset more per step, time that is not on the run queue (a sleep, a throttled device). Under synchronous
collectives every other rank waits that much longer and the step lasts that much longer; every rank's
run-queue wait is the one recorded. The cells are replayed (replay_matrix.py: the run-queue waits, each
rank's waits, the agents' shares remade) with each --detectors setting and scored by the matrix's rules: per
severity the cells named exactly within the issue's bound, and the false alarms before the onsets.

`--every-rank` makes a cell of every rank at every onset (not one rank, rotating); `--cells` prints each cell with
the slowed rank's step-thread on-CPU time over its peers' before the onset (slow_lead.py's `cpu`: a rank that did
less work than its peers must first use up that headroom) and the steps to its naming.

What it shows that live runs cannot in the same time: every severity against the same real clean noise, with
and without a rule's part (e.g. `{"runqueue_discount": false}`), in seconds. What it is not: a live run (the
injected rank's own noise is its clean self's; a real slow rank's slowness also shifts when the others run).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: when run as a script only its folder is on sys.path

from bench.detection_jobs import matrix
from bench.detection_jobs.replay_matrix import WORK_FIGURE, evaluate
from bench.recordings import read_json
from collectors.detectors.straggler import StragglerConfig


def inject(run: dict[str, Any], factor: float, rank: int, onset: int) -> dict[str, Any]:
    """A fault cell made of clean `run`: `rank` slowed by `factor` from `onset`, to the matrix's end of it."""
    out = copy.deepcopy(run)
    end = onset + matrix.AFTER[factor]
    # every figure kept (the on-CPU times too: a sleep adds no CPU work), the other ranks' waits raised below
    per_rank = {step: figures for step, *figures in out["per_rank"]}
    before = [w[5] for w in out["waits"] if onset - 25 <= w[0] < onset - 5 and w[5]]
    extra = (factor - 1.0) * statistics.median(before)  # as shapes.py: (f - 1) x the rank's median step before
    waits = []
    for w in out["waits"]:
        step = w[0]
        if step >= end:
            break
        if step >= onset and step in per_rank and w[5]:
            own = per_rank[step][0]
            for r in own:
                if int(r) != rank:
                    own[r] += extra
            figures = per_rank[step]  # the entry less its step: work_time one place before WORK_FIGURE
            work = figures[WORK_FIGURE - 1] if len(figures) >= WORK_FIGURE else {}
            if str(rank) in work:  # the sleep is the slowed rank's own time, as its work_time counts it
                work[str(rank)] += extra
            ordered = sorted(own.items(), key=lambda kv: (kv[1], int(kv[0])))
            w = [step, int(ordered[0][0]), ordered[0][1], statistics.median(own.values()), w[4], w[5] + extra,
                 ordered[-1][1], int(ordered[-1][0])]
        waits.append(w)
    finalised = dict(out["finalised"])
    out.update(waits=waits, per_rank=[[s, *per_rank[s]] for s in sorted(per_rank) if s < end],
               finalised=[[s, ns] for s, ns in out["finalised"] if s < end], factor=factor, where="injected",
               cell=f"{out['shape']}-injected-{factor:g}x",
               truth={"rank": rank, "step": onset, "time": finalised[onset] / 1e9 - 0.001})
    out["steps"] = out["steps_done"] = len(out["finalised"])
    return out


def cells(runs: list[dict[str, Any]], factor: float, onsets: list[int], every_rank: bool = False) -> list[dict[str, Any]]:
    """The cells of `runs` at each onset: one rank each (rotating), or with `every_rank` one per rank."""
    out: list[dict[str, Any]] = []
    for run in runs:
        for onset in onsets:
            if onset + matrix.AFTER[factor] <= run["steps_done"] and onset in dict(run["finalised"]):
                ranks = range(run["world"]) if every_rank else [(len(out) + 1) % run["world"]]
                out.extend(inject(run, factor, rank, onset) for rank in ranks)
    return out


def work_before(run: dict[str, Any], rank: int, onset: int, steps: int = 30) -> float | None:
    """The rank's step-thread on-CPU time over the median of its peers', the median of the per-step ratios over the
    `steps` steps before `onset` (None where the run recorded no on-CPU times there)."""
    ratios = []
    for step, *figures in run.get("per_rank", []):
        oncpu = figures[3] if len(figures) > 3 else {}
        if onset - steps <= step < onset and len(oncpu) >= run["world"]:
            others = [v for r, v in oncpu.items() if r != str(rank)]
            if statistics.median(others) > 0:
                ratios.append(oncpu[str(rank)] / statistics.median(others))
    return statistics.median(ratios) if ratios else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, nargs="+", help="detection_matrix.json files (or .json.gz) with per_rank figures")
    p.add_argument("--detectors", nargs="*", default=['{"runqueue_discount": false}', "{}"],
                   help="straggler settings, each inline JSON (default: without the run-queue discount, and the defaults)")
    p.add_argument("--onsets", default="40,150", help="comma-separated onset steps (default 40,150)")
    p.add_argument("--shapes", default="", help="comma-separated shapes of the clean runs used (default: every shape)")
    p.add_argument("--factors", default=",".join(f"{f:g}" for f in matrix.FACTORS),
                   help="comma-separated severities (default: every one of the matrix's)")
    p.add_argument("--every-rank", action="store_true", help="a cell per rank at every onset (default: one, rotating)")
    p.add_argument("--cells", action="store_true", help="print each cell: the rank's on-CPU time over its peers' "
                   "before the onset, and the steps to its naming")
    args = p.parse_args(argv)
    try:
        settings = [json.loads(s) for s in args.detectors]
        for s in settings:
            StragglerConfig(**s)
        onsets = [int(v) for v in args.onsets.split(",")]
        factors = [float(v) for v in args.factors.split(",")]
    except (ValueError, TypeError) as exc:
        p.error(str(exc))
    if unknown := [f for f in factors if f not in matrix.AFTER]:
        p.error(f"unknown --factors {unknown} (one of {', '.join(f'{f:g}' for f in matrix.FACTORS)})")
    shapes = set(filter(None, args.shapes.split(",")))
    runs = [run for path in args.results for run in read_json(path)["runs"]
            if not run["factor"] and run.get("per_rank") and (not shapes or run.get("shape") in shapes)]
    if not runs:
        print("no clean run recorded per-rank figures (record with bench/detection.py --matrix)", file=sys.stderr)
        return 1
    made = {factor: cells(runs, factor, onsets, args.every_rank) for factor in factors}
    print(f"{len(runs)} clean runs; cells per severity: " + ", ".join(f"{f:g}x {len(c)}" for f, c in made.items()))
    for s in settings:
        found = {f: evaluate(c, s) for f, c in made.items() if c}
        named = ", ".join(f"{f:g}x {out['in_time'].get(f'{f:g}x', '0/0')}" for f, out in found.items())
        alarms = sum(out["false_alarms"] for out in found.values())
        print(f"{json.dumps(s)}: named exactly in time {named}; false alarms before the onsets {alarms}")
        if args.cells:
            for factor, out in found.items():
                for cell, scored in zip(made[factor], out["scored"], strict=True):
                    truth, det = cell["truth"], scored.get("detection") or {}
                    work = work_before(cell, truth["rank"], truth["step"])
                    print(f"  {cell['job']} {factor:g}x rank {truth['rank']} from {truth['step']}: on-CPU over its "
                          f"peers before {'-' if work is None else f'{work:.3f}'}, named after "
                          f"{det.get('delay_steps')} steps ({det.get('rank')}), in time {bool(det.get('in_time'))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
