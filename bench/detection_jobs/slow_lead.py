"""Where an injected slow rank's time goes in the waits: does the rank itself keep waiting, or do the others wait?

    python bench/detection_jobs/slow_lead.py RESULT.json [RESULT.json ...] [--shapes tp] [--steps 30]

RESULT.json is what `bench/detection.py --matrix` writes, from runs that recorded each rank's figures per step
(`per_rank`: `collective_wait`, and the step thread's on-CPU time). For every fault cell, over the `--steps` steps
before the onset (not the job's start-up steps, `wait_warmup`) and the `--steps` steps from it, prints:

- `own` / `others`: the change in the slow rank's mean collective wait and in the other ranks' median one (seconds
  a step). Under synchronous collectives a rank f times slower adds (f - 1) x the step to every other rank's wait
  and nothing to its own; if a second process group's collectives absorbed it (the rank waiting for its subgroup's
  peers after its slowness), `own` would rise by part of the injected seconds;
- `lead`: the median over the steps from the onset of the rank's lead over the other ranks' median wait, as a share
  of the step (the evidence a perfect rule would read: ~(f - 1) / f), and before the onset (its lead when clean);
- `least`: the share of the steps from the onset on which it waited least (the rule's lanes climb on those only);
- `cpu`: the rank's step-thread on-CPU time over the other ranks' median before the onset (median of per-step
  ratios): a rank that already did more work than its peers starts ahead, one that did less must first use up
  its headroom;
- the steps to its naming, as the matrix scored the live run.

Why: issue 24's tensor-parallel cells with the slowness in the forward were missed or late (1.2x, 1.1x, 1.5x), and
the question was whether the signal (the subgroup's collectives) or the rule is at fault (docs/detectors.md,
"The tensor-parallel forward cells").
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: when run as a script only its folder is on sys.path

from bench.recordings import read_json, recording_name
from collectors.detectors.straggler import StragglerConfig

WARMUP = StragglerConfig().wait_warmup  # a job's first steps (start-up: every rank's waits are seconds apart)


def _ratio_to_peers(figures: dict[str, float], rank: str) -> float | None:
    """`rank`'s figure over the median of the other ranks' (None when it cannot be formed)."""
    others = [v for r, v in figures.items() if r != rank]
    if rank not in figures or not others or statistics.median(others) <= 0:
        return None
    return figures[rank] / statistics.median(others)


def cell_lead(run: dict[str, Any], steps: int = 30) -> dict[str, Any] | None:
    """The figures above for one fault cell; None for a clean run or one without per-rank figures either side."""
    truth = run.get("truth")
    if not truth or not run.get("per_rank"):
        return None
    rank, onset, world = str(truth["rank"]), int(truth["step"]), int(run["world"])
    scale = {w[0]: w[5] for w in run.get("waits", []) if w[5]}
    before: dict[str, list[float]] = {"own": [], "others": [], "lead": [], "cpu": []}
    after: dict[str, list[float]] = {"own": [], "others": [], "lead": [], "least": []}
    for step, waits, *rest in run["per_rank"]:
        if len(waits) < world or rank not in waits or step not in scale:
            continue
        if max(onset - steps, WARMUP) <= step < onset:
            side = before
            oncpu = rest[2] if len(rest) > 2 else {}
            ratio = _ratio_to_peers(oncpu, rank) if len(oncpu) >= world else None
            if ratio is not None:
                before["cpu"].append(ratio)
        elif onset <= step < onset + steps:
            side = after
            after["least"].append(float(min(waits, key=lambda r: (waits[r], int(r))) == rank))
        else:
            continue
        others = statistics.median(v for r, v in waits.items() if r != rank)
        side["own"].append(waits[rank])
        side["others"].append(others)
        side["lead"].append((others - waits[rank]) / scale[step])
    if not before["own"] or not after["own"]:
        return None
    detection = (run.get("score") or {}).get("detection") or {}
    return {
        "cell": run["cell"], "job": run["job"], "where": run["where"], "factor": run["factor"],
        "injected_s": truth.get("extra_s"), "load": (run.get("loadavg_1min") or [None])[0],
        "own_s": statistics.fmean(after["own"]) - statistics.fmean(before["own"]),
        "others_s": statistics.fmean(after["others"]) - statistics.fmean(before["others"]),
        "lead_before": statistics.median(before["lead"]), "lead": statistics.median(after["lead"]),
        "least": statistics.fmean(after["least"]),
        "cpu": statistics.median(before["cpu"]) if before["cpu"] else None,
        "named_after": detection.get("delay_steps"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, nargs="+", help="detection_matrix.json files (or .json.gz) with per-rank figures")
    p.add_argument("--shapes", default="", help="comma-separated shapes (default: every shape)")
    p.add_argument("--steps", type=int, default=30, help="steps before the onset and from it (default 30)")
    args = p.parse_args(argv)
    shapes = set(filter(None, args.shapes.split(",")))
    rows = []
    for path in args.results:
        for run in read_json(path)["runs"]:
            if shapes and run.get("shape") not in shapes:
                continue
            row = cell_lead(run, args.steps)
            if row is not None:
                rows.append((recording_name(path).removesuffix(".json").removeprefix("detection_matrix_"), row))
    if not rows:
        print("no fault cell with per-rank figures", file=sys.stderr)
        return 1
    print("| set | cell | load | injected s | own wait s | others' wait s | lead before | lead | least | cpu before | "
          "named after |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in sorted(rows, key=lambda nr: (nr[1]["where"], nr[1]["factor"], nr[0])):
        cpu = "-" if r["cpu"] is None else f"{r['cpu']:.3f}"
        injected = "-" if r["injected_s"] is None else f"{r['injected_s']:.4f}"
        print(f"| {name} | {r['cell']} | {r['load']} | {injected} | {r['own_s']:+.4f} | {r['others_s']:+.4f} | "
              f"{r['lead_before']:+.3f} | {r['lead']:+.3f} | {r['least']:.0%} | {cpu} | {r['named_after']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
