"""False hangs on clean torchrun jobs: the straggler matrix's shapes run clean, every `hang` event counted.

    python bench/hang_clean.py [--shapes ddp,sync2,accum,tp,fsdp2] [--runs 1] [--steps 300] [--out bench/results]

Held-out clean runs of bench/detection.py --matrix raised critical `hang` events naming a rank missing from step
0 or 1 that ran to the end (docs/detectors.md, "hang"). This runs only clean jobs (the same shapes.py jobs, the
same root and agent), and per run reports the events raised (every one is a false alarm: nothing is injected)
and, read from the root's store, the step windows finalised without a rank that a CLOSING window of the same
step holds (`partial`: a rank that reported the step but did not log that metric there: what the old rule read
as missing). JSON: OUT/hang_clean.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

# bench/ is this script's folder (first on sys.path): its neighbours import as they are
from harness import BenchError, Progress, apply_quick, failure, parser, run_in_workdir, write_result
from machine import REPO, machine_facts

sys.path.insert(0, str(REPO))  # the checkout: when run as a script only bench/ is on sys.path

from bench.detection import run_cell
from bench.detection_jobs import matrix
from bench.torchrun_jobs import root_and_agent
from collectors.detectors.hang import CLOSING

QUICK = {"shapes": "ddp,sync2", "steps": 40}


def partial_windows(db: Path, job: str) -> list[dict[str, Any]]:
    """Step windows of `job` (of any metric, CLOSING ones included) finalised without a rank that one of the
    step's CLOSING windows holds (a CLOSING window holds every expected rank but those it lists as missing)."""
    con = sqlite3.connect(db)
    try:
        rows = [(metric, idx, set(json.loads(listed))) for metric, idx, listed in con.execute(
            "SELECT metric, idx, missing FROM windows WHERE job=? AND width_ms=0", (job,))]
    finally:
        con.close()
    closing: dict[int, list[set[int]]] = {}
    for metric, idx, missing in rows:
        if metric in CLOSING:
            closing.setdefault(idx, []).append(missing)
    out = []
    for metric, idx, missing in sorted(rows, key=lambda r: (r[1], r[0])):
        if not missing:
            continue
        reported = sorted(r for r in missing if any(r not in gone for gone in closing.get(idx, [])))
        if reported:
            out.append({"step": idx, "metric": metric, "ranks": reported})
    return out


def run(args: argparse.Namespace, workdir: Path, progress: Progress) -> dict[str, Any]:
    result: dict[str, Any] = {"benchmark": "hang_clean", "complete": False, "machine": machine_facts(),
                              "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                              "loadavg_start": os.getloadavg(), "runs": []}
    cells = [matrix.Cell(shape, 0.0, "-", -1, -1, args.steps, seed) for seed in range(args.runs)
             for shape in args.shapes.split(",")]
    try:
        with root_and_agent(workdir) as tree:
            for i, cell in enumerate(cells, 1):
                record = run_cell(cell, args, tree["api"], tree["agent"], workdir, tree["services"])
                hangs = [e for e in record["events"] if e["kind"] == "hang"]
                partial = partial_windows(tree["db"], record["job"])
                result["runs"].append({"job": record["job"], "shape": cell.shape, "steps_done": record["steps_done"],
                                       "wall_s": record["wall_s"], "loadavg_1min": record["loadavg_1min"],
                                       "events": [{**{k: e.get(k) for k in ("kind", "step", "ranks", "severity")},
                                                   "summary": (e.get("detail") or {}).get("summary")}
                                                  for e in record["events"]],
                                       "hang_details": [e["detail"] for e in hangs], "partial_windows": partial})
                progress(f"{i}/{len(cells)} {cell.shape}: {record['steps_done']} steps, {record['wall_s']} s, "
                         f"hangs {len(hangs)}, other events {len(record['events']) - len(hangs)}, "
                         f"windows without a rank that closed the step {len(partial)}")
        result["complete"] = True
    except (BenchError, KeyboardInterrupt) as exc:
        result["error"] = failure(exc)
    runs = result["runs"]
    steps = sum(r["steps_done"] for r in runs)
    result["summary"] = {
        "runs": len(runs), "clean_steps": steps,
        "hang_events": sum(1 for r in runs for e in r["events"] if e["kind"] == "hang"),
        "other_events": sum(1 for r in runs for e in r["events"] if e["kind"] != "hang"),
        "runs_with_partial_windows": sum(1 for r in runs if r["partial_windows"]),
        "partial_windows": sum(len(r["partial_windows"]) for r in runs)}
    result["loadavg_end"] = os.getloadavg()
    return result


def report(result: dict[str, Any]) -> None:
    s = result["summary"]
    print(f"{s['runs']} clean runs, {s['clean_steps']} steps: {s['hang_events']} hang events, "
          f"{s['other_events']} other events; {s['partial_windows']} step windows in {s['runs_with_partial_windows']} "
          "runs lacked a rank that closed the step")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = parser(__doc__, "hang_clean", QUICK)
    p.add_argument("--shapes", default=",".join(matrix.SHAPES), help="comma-separated shapes (default all)")
    p.add_argument("--runs", type=int, default=1, help="clean runs per shape (default 1)")
    p.add_argument("--steps", type=int, default=300, help="steps of a run (default 300)")
    p.add_argument("--poll-s", type=float, default=0.5, help="seconds between polls of the events API (default 0.5)")
    p.add_argument("--run-timeout", type=float, default=600.0, help="seconds one job may take (default 600)")
    p.add_argument("--workdir", type=Path, help="keep logs, the agent's socket and the root's DB here")
    args = p.parse_args(argv)
    apply_quick(args, argv, QUICK)
    for shape in args.shapes.split(","):
        if shape not in matrix.SHAPES:
            p.error(f"unknown shape {shape!r} (one of {', '.join(matrix.SHAPES)})")
    if args.runs < 1 or args.steps < 2:
        p.error("--runs must be at least 1 and --steps at least 2")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    result = run_in_workdir("hang_clean", args.workdir, lambda workdir: run(args, workdir, Progress()))
    return write_result(args.out, "hang_clean", result, "hang clean bench", report)


if __name__ == "__main__":
    raise SystemExit(main())
