"""The cpu_starved rule replayed over the recorded straggler-matrix runs: how often it names a rank, and which.

    python bench/cpu_starved_replay.py [--results bench/results] [--out bench/results]

Every run of bench/results/detection_matrix*.json that recorded each rank's `runqueue_wait` per step (the
run-queue matrices: per_rank) is fed through collectors/detectors/cpu_starved.py as the root would feed it: per
step the rank's run-queue waits (exact: the jobs have 3-4 ranks) and the step's median step time. Nothing in
those runs starved a rank on purpose: each event names a rank this loaded 2-core machine kept off a CPU much
longer than its peers (the figures say how much). JSON: OUT/cpu_starved_replay.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

# bench/ is this script's folder (first on sys.path): its neighbours import as they are
from machine import REPO

sys.path.insert(0, str(REPO))  # the checkout: when run as a script only bench/ is on sys.path

from bench.recordings import read_json, recorded, recording_name
from collectors.common.keys import Key
from collectors.common.rows import Row
from collectors.detectors import EventLog
from collectors.detectors.cpu_starved import CpuStarvedConfig, CpuStarvedDetector
from telemetry.summary import Summary


def _summary(values: dict[int, float]) -> Summary:
    return Summary.from_arrays(np.array(list(values.values()), dtype=np.float64),
                               np.array(list(values), dtype=np.int64), time.time_ns())


def replay(run: dict[str, Any], config: CpuStarvedConfig) -> tuple[int, list[dict[str, Any]]]:
    """(steps judged, the events raised) for one recorded run."""
    median_step = {w[0]: w[5] for w in run["waits"]}
    log = EventLog(None)
    det = CpuStarvedDetector(log, None, config)
    judged = 0
    for step, _waits, queued, *_ in run["per_rank"]:
        queued = {int(rank): value for rank, value in queued.items()}
        if not queued or not median_step.get(step):
            continue
        now = time.time_ns()
        det.observe(Row(Key(run["job"], "runqueue_wait", step, 0), run["world"], _summary(queued), 0, now))
        det.observe(Row(Key(run["job"], "step_time", step, 0), run["world"],
                        _summary({rank: median_step[step] for rank in queued}), 0, now))
        judged += 1
    return judged, log.query(None, limit=1000)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=REPO / "bench" / "results", help="where the matrices are")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results", help="directory for the JSON")
    p.add_argument("--config", default="{}", help='cpu_starved options as JSON (default: the defaults)')
    args = p.parse_args(argv)
    config = CpuStarvedConfig(**json.loads(args.config))
    runs, steps, named = [], 0, 0
    for path in recorded(args.results, "detection_matrix*.json"):
        for run in read_json(path)["runs"]:
            if not any(row[2] for row in run.get("per_rank") or []):
                continue
            judged, events = replay(run, config)
            steps += judged
            named += bool(events)
            runs.append({"file": recording_name(path), "job": run["job"], "cell": run["cell"], "steps": judged,
                         "loadavg_1min": run.get("loadavg_1min"),
                         "events": [{"step": e["step"], "ranks": e["ranks"], "summary": e["detail"]["summary"]}
                                    for e in events]})
            for e in events:
                print(f"{recording_name(path)} {run['cell']}: step {e['step']}: {e['detail']['summary']}")
    result = {"benchmark": "cpu_starved_replay", "config": vars(config), "runs": runs,
              "summary": {"runs": len(runs), "steps": steps, "runs_with_event": named,
                          "events": sum(len(r["events"]) for r in runs)}}
    print(f"{len(runs)} recorded runs, {steps} steps: {named} runs with a cpu_starved event "
          f"({result['summary']['events']} events)")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "cpu_starved_replay.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
