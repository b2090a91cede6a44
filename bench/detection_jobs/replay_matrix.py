"""Replay the straggler matrix's recorded runs through the straggler detector with other settings, offline.

    python bench/detection_jobs/replay_matrix.py RESULT.json [RESULT.json ...] [--detectors JSON]
        [--sweep OPTION=V1,V2,...] [--live] [--alarms] [--cells]

RESULT.json is what `bench/detection.py --matrix` writes (detection_matrix.json): every run keeps, per step,
the rule's input (`waits`: the least-waiting rank, min and p50 of `collective_wait`, the step's `step_time`
p50) and when the root finalised the step. Each run's steps are fed, in order, to a fresh
StragglerDetector whose event log's clock is the step's finalising time, so an event "opens" when the root
would have opened it, and the run is scored by the matrix's own rules (matrix.score_cell): false alarms per
1,000 clean steps per shape, and per severity the cells named exactly within the issue's bound.

The summaries are rebuilt from what was recorded: the least-waiting rank at the min, every other rank at the
p50 (exact for 3 ranks, where the p50 is the one other rank between; for 4, the two middle ranks' mean).
This is the fast loop for choosing the rule's settings from real runs (seconds instead of an hour of
torchrun jobs); what it chose must then be confirmed on new runs, which it has not seen. --live scores the
events the live root opened instead (no replay). False alarms are given with every alarm and, apart, those on an
uninjected slow rank (matrix.uninjected_slowness: slow by its own recorded on-CPU work before the alarm).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: when run as a script only its folder is on sys.path

from bench.detection_jobs import matrix
from bench.detection_jobs.replay import clocked_log
from bench.recordings import read_json
from collectors.agent.wait_share import SEED_STEPS, WaitShares, excess_queued
from collectors.common.keys import Key
from collectors.common.rows import Row
from collectors.detectors.cpu_starved import CpuStarvedConfig, CpuStarvedDetector
from collectors.detectors.straggler import StragglerConfig, StragglerDetector
from telemetry.names import ONCPU_METRIC, RUNQUEUE_METRIC, WAIT_SHARE_METRIC
from telemetry.summary import Summary


def _row(job: str, metric: str, step: int, values: list[float], finalised_ns: int) -> Row:
    summary = Summary.from_arrays(np.asarray(values, dtype=np.float64), np.arange(len(values), dtype=np.int64),
                                  finalised_ns)
    return Row(Key(job, metric, step, 0), len(values), summary, 0, finalised_ns)


WORK_FIGURE = 6  # a per_rank entry's index of each rank's work_time (bench/detection.py's PER_RANK, after the step)
SEED_KEY = "share_seed_steps"  # a replay setting for the agents' WaitShares.seed_steps, not a StragglerConfig field


def replay_run(run: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """The run's record with its straggler events replaced by those of a detector with `settings`.

    A run that recorded each rank's figures (`per_rank`: `collective_wait` and `runqueue_wait` by rank) is
    replayed from them: the step's run-queue waits first (as the root's suite orders them), then its waits,
    each rank's own; and the running shares are remade as its agent makes them now (wait + run-queue wait over
    the step, averaged: collectors/agent/wait_share.py; from each rank's recorded work_time where the run has it,
    else the step's p50 stands in for each rank's own length), since the recorded ones may be an older agent's.
    Other runs are replayed from the least rank and the p50."""
    events, now, seen = clocked_log()
    # the agents' seeding of each rank's running share (WaitShares.seed_steps): a replay key, not the root's
    settings = dict(settings)
    seed_steps = int(settings.pop(SEED_KEY, SEED_STEPS))
    detector = StragglerDetector(events, config=StragglerConfig(**settings))
    cpu_work = settings.get("oncpu_scale", True)  # cpu_starved's use of the on-CPU times follows the straggler's
    # (its ratio's steps and margin too: cpu_starved's own options of the same names, swept together here)
    # as at the root: its open event leaves its ranks out of the straggler's
    ratio = {k: settings[k] for k in ("oncpu_steps", "oncpu_margin") if k in settings}
    starved = CpuStarvedDetector(events, config=CpuStarvedConfig(oncpu_scale=cpu_work, **ratio))
    finalised = dict((step, ns) for step, ns in run["finalised"])
    world, job = run["world"], run["job"]
    # each rank's collective and run-queue waits and, where recorded (bench/detection.py's PER_RANK: the step
    # thread's on-CPU time, the SDK's `oncpu_time`; `bench.oncpu_step` in runs from before the SDK logged it), its
    # on-CPU time
    # and, where recorded (from session 46 on), its work_time
    per_rank = {entry[0]: (entry[1], entry[2], entry[4] if len(entry) > 4 else {}, entry[WORK_FIGURE] if len(entry) > WORK_FIGURE else {})
                for entry in run.get("per_rank", [])}
    # The agents' running wait shares, where the run recorded them (runs from before them have none: the rule
    # then judges the per-step waits alone, as the live root did)
    shares = {step: (least, low, p50) for step, least, low, p50, *_ in run.get("shares", [])}
    running = WaitShares(seed_steps=seed_steps)
    discount = settings.get("runqueue_discount", True)  # the agents' share of it follows the root's setting here
    for step, least, low, p50, _count, step_p50, *_ in run["waits"]:
        if step_p50 is None or step not in finalised:
            continue
        ns = finalised[step]
        now[0] = ns / 1e9
        waits = [p50] * world
        waits[least] = low
        own = per_rank.get(step)
        queued: list[float] | None = None
        oncpu: list[float] | None = None
        work: list[float] | None = None
        if own is not None and len(own[0]) == world:
            waits = [own[0][str(r)] for r in range(world)]
            if len(own[1]) == world:
                queued = [own[1][str(r)] for r in range(world)]
            if len(own[2]) == world:
                oncpu = [own[2][str(r)] for r in range(world)]
            if len(own[3]) == world:
                work = [own[3][str(r)] for r in range(world)]
        detector.observe(_row(job, "step_time", step, [step_p50] * world, ns))
        starved.observe(_row(job, "step_time", step, [step_p50] * world, ns))
        if oncpu is not None and cpu_work:  # before the step's run-queue waits, as the root's suite orders them
            detector.observe(_row(job, ONCPU_METRIC, step, oncpu, ns))
            starved.observe(_row(job, ONCPU_METRIC, step, oncpu, ns))
        if queued is not None:
            detector.observe(_row(job, RUNQUEUE_METRIC, step, queued, ns))
            starved.observe(_row(job, RUNQUEUE_METRIC, step, queued, ns))
        detector.observe(_row(job, "collective_wait", step, waits, ns))
        if per_rank and step in shares:
            # each rank's wait and work as its agent read them, where recorded; else the step's p50 stands in for
            # each rank's own length
            own_wait = waits if work is not None else [min(w, step_p50) for w in waits]
            own_work = work if work is not None else [max(0.0, step_p50 - w) for w in waits]
            excess = (excess_queued(dict(enumerate(queued)), dict(enumerate(own_work)))
                      if queued is not None and discount else {})
            remade = [running.update(job, r, step, own_wait[r], own_work[r], excess.get(r, 0.0)) for r in range(world)]
            if all(v is not None for v in remade):
                detector.observe(_row(job, WAIT_SHARE_METRIC, step, [float(v or 0.0) for v in remade], ns))
        elif step in shares:
            share_least, share_low, share_p50 = shares[step]
            values = [share_p50] * world
            values[share_least] = share_low
            detector.observe(_row(job, WAIT_SHARE_METRIC, step, values, ns))
    stored = events.query(job, limit=10_000)
    events.close()
    return {**run, "events": [{**e, "seen": seen[e["id"]]} for e in stored]}


def evaluate(runs: list[dict[str, Any]], settings: dict[str, Any], live: bool = False) -> dict[str, Any]:
    """Per shape the false alarms per 1,000 clean steps (all, and without those on an uninjected slow rank); per
    severity the cells named exactly in time. `live`: the runs' recorded events, not replayed."""
    scored = [matrix.score_cell(run if live else replay_run(run, settings)) for run in runs if run.get("waits")]
    shapes: dict[str, list[int]] = {}
    severities: dict[str, list[int]] = {}
    for s in scored:
        clean_alarms = shapes.setdefault(s["shape"], [0, 0, 0])
        clean_alarms[0] += s["clean_steps"]
        clean_alarms[1] += len(s["false_alarms"])
        clean_alarms[2] += sum(matrix.is_uninjected_slow(a) for a in s["false_alarms"])
        det = s.get("detection")
        if det is not None:
            cell = severities.setdefault(f"{s['factor']:g}x", [0, 0, 0])
            cell[0] += 1
            cell[1] += int(bool(det.get("in_time")))
            cell[2] += int(bool(det.get("in_time_by_lead")))
    return {"false_alarms_per_1000": {k: round(1000 * a / c, 1) if c else None for k, (c, a, _) in shapes.items()},
            "false_alarms": sum(a for _, a, _ in shapes.values()), "clean_steps": sum(c for c, _, _ in shapes.values()),
            "uninjected_slow": sum(u for _, _, u in shapes.values()),
            "other_false_alarms_per_1000": {k: round(1000 * (a - u) / c, 1) if c else None
                                            for k, (c, a, u) in shapes.items()},
            "in_time": {k: f"{hit}/{n}" for k, (n, hit, _) in sorted(severities.items())},
            # ... judged by the bound of the severity each rank's lead implies (matrix.lead_slowdown: the rule's own evidence)
            "in_time_by_lead": {k: f"{hit}/{n}" for k, (n, _, hit) in sorted(severities.items())}, "scored": scored}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, nargs="+", help="detection_matrix.json files (or .json.gz)")
    p.add_argument("--detectors", default="{}", help="straggler settings as inline JSON (StragglerConfig fields)")
    p.add_argument("--sweep", default=None, help="OPTION=V1,V2,... (JSON values): one line per value")
    p.add_argument("--alarms", action="store_true", help="list each false alarm (run, step, rank, and whether the rank "
                   "was an uninjected slow one)")
    p.add_argument("--live", action="store_true", help="score the events the live root opened (no replay)")
    p.add_argument("--cells", action="store_true", help="list each fault cell: the slow rank's measured slowdown in "
                   "wall time, the steps to its naming, in time by the injected factor's bound and by the measured one")
    args = p.parse_args(argv)
    runs = [run for path in args.results for run in read_json(path)["runs"]]
    try:
        base = json.loads(args.detectors)
        variants = [base]
        if args.sweep:
            option, values = args.sweep.split("=", 1)
            variants = [{**base, option: json.loads(v)} for v in values.split(",")]
        StragglerConfig(**{k: v for k, v in base.items() if k != SEED_KEY})
    except (ValueError, TypeError) as exc:
        p.error(str(exc))
    started = time.monotonic()
    for settings in variants:
        out = evaluate(runs, settings, args.live)
        print(f"{'live' if args.live else json.dumps(settings)}: false alarms {out['false_alarms']} in "
              f"{out['clean_steps']} clean steps, per 1,000 {out['false_alarms_per_1000']}; of them on an uninjected "
              f"slow rank {out['uninjected_slow']}, per 1,000 without those {out['other_false_alarms_per_1000']}; in time {out['in_time']} (by the lead-implied slowdown's "
              f"bound: {out['in_time_by_lead']})")
        if args.cells:
            for s in out["scored"]:
                det = s.get("detection")
                if det is not None:
                    print(f"  {s['cell']}: lead-implied {det.get('slowdown')}x, named after "
                          f"{det.get('delay_steps')} steps ({det.get('rank')}), in time {bool(det.get('in_time'))}, "
                          f"by the lead-implied slowdown {bool(det.get('in_time_by_lead'))}")
        if args.alarms:
            for s in out["scored"]:
                for alarm in s["false_alarms"]:
                    print(f"  false alarm {s['cell']} ({s['job']}): step {alarm['step']} (raised on "
                          f"{alarm['raised_at']}) ranks {alarm['ranks']}; "
                          f"uninjected slow rank: {alarm['uninjected_slow']}")
    print(f"{len(runs)} runs x {len(variants)} settings in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
