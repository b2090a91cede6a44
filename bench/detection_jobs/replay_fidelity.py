"""How faithfully the replay reproduces the live root: per recorded run, the live events against the replay's.

    python bench/detection_jobs/replay_fidelity.py RESULT.json [RESULT.json ...] [--out PATH]

Why: candidate rules are judged by replaying recorded runs (replay_matrix.py, replay_compare.py), so a replay that
names a slight straggler 20 steps away from where the live root named it judges the candidate on a different job.
The replay remakes the agents' running shares from each rank's recorded figures; before session 46 the recordings
held each rank's wait but not its `work_time`, and the replay let the step's p50 stand in for each rank's length.
Per run this prints the live root's result (the steps from the onset to the naming, or the false alarms of a clean
run), the replay's with the recorded work (where the run has it) and the replay's with the step's p50 instead, so
the two can be told apart; and per set how many runs each replay reproduces within `--tolerance` steps.
`--detectors` replays with the rule the recording ran under where that is not today's (e.g. `{"share_seed_steps": 1}`
for runs recorded before the agents seeded their running shares by the median of five).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: when run as a script only its folder is on sys.path

from bench.detection_jobs.matrix import score_cell
from bench.detection_jobs.replay_matrix import WORK_FIGURE, replay_run
from bench.recordings import read_json, recording_name


def outcome(scored: dict[str, Any]) -> int | str | None:
    """A fault cell's steps to its exact naming (None: missed or the wrong rank); a clean run's false alarms."""
    if not scored["factor"]:
        return f"{len(scored['false_alarms'])} FA"
    det = scored.get("detection")
    return det["delay_steps"] if det and det.get("rank") == "exact" else None


def agrees(live: int | str | None, replayed: int | str | None, tolerance: int) -> bool:
    if isinstance(live, int) and isinstance(replayed, int):
        return abs(live - replayed) <= tolerance
    return live == replayed


def compare(run: dict[str, Any], settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """One run: live, replayed from the recorded work (None where the run recorded none), replayed from the p50,
    both with `settings` (replay_matrix.replay_run's)."""
    settings = settings or {}
    has_work = any(len(entry) > WORK_FIGURE and entry[WORK_FIGURE] for entry in run.get("per_rank", []))
    without = {**run, "per_rank": [entry[:WORK_FIGURE] for entry in run.get("per_rank", [])]}
    return {"cell": run["cell"], "job": run.get("job"), "live": outcome(score_cell(run)),
            "replay_work": outcome(score_cell(replay_run(run, settings))) if has_work else None,
            "replay_p50": outcome(score_cell(replay_run(without, settings))), "has_work": has_work}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, nargs="+", help="detection_matrix.json files (or .json.gz)")
    p.add_argument("--tolerance", type=int, default=3, help="steps a replay may differ from live and still agree")
    p.add_argument("--detectors", default="{}", help="the replay's settings as inline JSON (replay_matrix.py's)")
    p.add_argument("--out", type=Path, default=None, help="write every run's comparison here as JSON")
    args = p.parse_args(argv)
    if args.tolerance < 0:
        p.error("--tolerance must be >= 0")
    try:
        settings = json.loads(args.detectors)
    except ValueError as exc:
        p.error(f"--detectors: not JSON ({exc})")
    if not isinstance(settings, dict):
        p.error("--detectors must be a JSON object")
    sets = []
    for path in args.results:
        rows = [compare(run, settings) for run in read_json(path)["runs"] if run.get("waits")]
        print(f"{recording_name(path)}:")
        for row in rows:
            work = "-" if not row["has_work"] else str(row["replay_work"])
            print(f"  {row['cell']:28s} live {row['live']!s:>6}   replay (work) {work:>6}   replay (p50) "
                  f"{row['replay_p50']!s:>6}")
        with_work = [r for r in rows if r["has_work"]]
        summary = {"set": recording_name(path), "runs": len(rows), "with_work": len(with_work),
                   "agree_work": sum(agrees(r["live"], r["replay_work"], args.tolerance) for r in with_work),
                   "agree_p50": sum(agrees(r["live"], r["replay_p50"], args.tolerance) for r in rows), "rows": rows}
        print(f"  within {args.tolerance} steps of live: replay (work) {summary['agree_work']}/{len(with_work)}, "
              f"replay (p50) {summary['agree_p50']}/{len(rows)}")
        sets.append(summary)
    if args.out is not None:
        args.out.write_text(json.dumps({"tolerance": args.tolerance, "settings": settings, "sets": sets}, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
