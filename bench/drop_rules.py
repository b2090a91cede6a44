#!/usr/bin/env python
"""The MFU-drop and data-loader-stall rules over a matrix of simulated step series (issue 24 item 3).

    python bench/drop_rules.py [--seeds 5] [--clean-steps 1000] [--out bench/results]

Each cell is one rule x one severity x one onset x one noise level, run over --seeds seeds: the step series a
job of 8 ranks would log, fed as the root's finalised windows (exact Summaries) to the detector at its
defaults. Per cell: runs named, the delay in steps from onset to the event (median and worst), and whether the
event's onset step is within 3 steps of the truth. Per noise level: events over --clean-steps clean steps per
seed (false alarms). Prints the table and writes drop_rules.json; tests/test_drop_rules.py runs the same
matrix (fewer seeds) and holds the rules to BOUNDS.

Noise levels (what a job's per-step figure does with nothing wrong):
  steady   MFU 1 % step-to-step (a dedicated GPU job); loader waits ~1 ms in 0.1 s steps, step time 2 %
  typical  MFU 5 %, level wandering a few % over tens of steps; waits ~2 ms, step time 5 %, a rank's 20 % blip
           every ~100 steps
  loaded   MFU 15 % step to step on a wandering level, plus 1-3-step dips of 30-50 % (a shared host
           descheduling the job) every ~50 steps; waits ~3 ms (lognormal 0.8), step time 20 %, a rank's
           one-step 30-60 % blip every ~50 steps
"""

from __future__ import annotations

import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: only bench/ is on sys.path

from collectors.common.keys import Key
from collectors.common.rows import Row
from collectors.detectors.dataloader_stall import DataloaderStallDetector
from collectors.detectors.events import EventLog
from collectors.detectors.mfu_drop import MfuDropDetector
from telemetry.summary import Summary

WORLD = 8
JOB = "j"
NOISES = ("steady", "typical", "loaded")
MFU_SEVERITIES = (0.75, 0.5, 0.3, 0.2, 0.1)            # relative MFU drop
LOADER_SEVERITIES = (0.9, 0.5, 0.3, 0.15, 0.1)         # the slow rank's extra wait, as a share of the step
ONSETS = (30, 300)
RUN_AFTER = 200  # steps simulated after the onset

# The rules' promises: (rule, noise, severity) -> the most steps from onset to the event. Cells absent are not
# promised (a drop inside the job's own noise cannot be told from it); clean runs must raise nothing.
BOUNDS: dict[tuple[str, str, float], int] = {
    ("mfu_drop", "steady", 0.75): 3, ("mfu_drop", "steady", 0.5): 4, ("mfu_drop", "steady", 0.3): 6,
    ("mfu_drop", "steady", 0.2): 12, ("mfu_drop", "steady", 0.1): 60,
    ("mfu_drop", "typical", 0.75): 3, ("mfu_drop", "typical", 0.5): 4, ("mfu_drop", "typical", 0.3): 20,
    ("mfu_drop", "loaded", 0.75): 10,
    ("dataloader_stall", "steady", 0.9): 1, ("dataloader_stall", "steady", 0.5): 2,
    ("dataloader_stall", "steady", 0.3): 3, ("dataloader_stall", "steady", 0.15): 12,
    ("dataloader_stall", "steady", 0.1): 50,
    ("dataloader_stall", "typical", 0.9): 1, ("dataloader_stall", "typical", 0.5): 2,
    ("dataloader_stall", "typical", 0.3): 6,
    ("dataloader_stall", "loaded", 0.9): 2, ("dataloader_stall", "loaded", 0.5): 5,
}


def _summary(values: list[float]) -> Summary:
    return Summary.from_arrays(np.array(values, dtype=np.float64), np.arange(len(values), dtype=np.int64),
                               time.time_ns())


def _row(metric: str, step: int, values: list[float]) -> Row:
    return Row(Key(JOB, metric, step, 0), len(values), _summary(values), 0, time.time_ns())


class _Level:
    """A level that wanders (AR(1) on its log) and, on a loaded host, dips for 1-3 steps now and then."""

    def __init__(self, rng: random.Random, wander: float, dip_every: int) -> None:
        self.rng, self.wander, self.dip_every = rng, wander, dip_every
        self.log, self.dip_left, self.dip = 0.0, 0, 0.0

    def next(self) -> float:
        self.log = 0.95 * self.log + self.rng.gauss(0.0, self.wander)
        if self.dip_left == 0 and self.dip_every and self.rng.random() < 1.0 / self.dip_every:
            self.dip_left, self.dip = self.rng.randint(1, 3), self.rng.uniform(0.3, 0.5)
        factor = 1.0
        if self.dip_left:
            self.dip_left -= 1
            factor = 1.0 - self.dip
        return math.exp(self.log) * factor


MFU_NOISE = {"steady": (0.01, 0.0, 0), "typical": (0.05, 0.01, 0), "loaded": (0.15, 0.02, 50)}
LOADER_NOISE = {"steady": (0.001, 0.3, 0.02, 0), "typical": (0.002, 0.5, 0.05, 100),
                "loaded": (0.003, 0.8, 0.20, 50)}  # wait scale s, its lognormal sigma, step-time noise, blip every


def mfu_steps(noise: str, seed: int, steps: int, onset: int | None, severity: float) -> Iterator[list[Row]]:
    rng = random.Random(seed)
    step_noise, wander, dip_every = MFU_NOISE[noise]
    level = _Level(rng, wander, dip_every)
    for step in range(steps):
        job = 0.4 * level.next() * math.exp(rng.gauss(0.0, step_noise))
        if onset is not None and step >= onset:
            job *= 1.0 - severity
        yield [_row("mfu", step, [job * math.exp(rng.gauss(0.0, 0.01)) for _ in range(WORLD)])]


def loader_steps(noise: str, seed: int, steps: int, onset: int | None, severity: float,
                 slow_rank: int = 3) -> Iterator[list[Row]]:
    rng = random.Random(seed)
    scale, sigma, step_noise, blip_every = LOADER_NOISE[noise]
    for step in range(steps):
        step_s = 0.1 * math.exp(rng.gauss(0.0, step_noise))
        waits = [scale * math.exp(rng.gauss(0.0, sigma)) for _ in range(WORLD)]
        if blip_every and rng.random() < 1.0 / blip_every:
            waits[rng.randrange(WORLD)] += step_s * rng.uniform(0.2, 0.6 if noise == "loaded" else 0.2)
        if onset is not None and step >= onset:
            waits[slow_rank] += severity * step_s
        yield [_row("dataloader_wait", step, waits), _row("step_time", step, [step_s] * WORLD)]


RULES: dict[str, tuple[Callable[..., Any], Callable[..., Iterator[list[Row]]]]] = {
    "mfu_drop": (MfuDropDetector, mfu_steps),
    "dataloader_stall": (DataloaderStallDetector, loader_steps),
}


def run(rule: str, noise: str, seed: int, steps: int, onset: int | None = None,
        severity: float = 0.0) -> list[dict[str, Any]]:
    """The events the rule raised over one series (each with `detected` = the step it was first raised at)."""
    make, series = RULES[rule]
    log = EventLog(None)
    detector = make(log)
    detected: dict[int, int] = {}
    for step, rows in enumerate(series(noise, seed, steps, onset, severity)):
        for row in rows:
            if detector.wants(row):
                detector.observe(row)
        for event in log.query(JOB, limit=1000):
            detected.setdefault(event["id"], step)
    return [{**event, "detected": detected[event["id"]]} for event in log.query(JOB, limit=1000)]


def cell(rule: str, noise: str, severity: float, onset: int, seeds: int) -> dict[str, Any]:
    delays: list[int | None] = []
    onsets_right = 0
    for seed in range(seeds):
        events = [e for e in run(rule, noise, 1000 + seed, onset + RUN_AFTER, onset, severity)
                  if e["detected"] >= onset]
        delays.append(events[0]["detected"] - onset if events else None)
        onsets_right += bool(events) and abs(events[0]["step"] - onset) <= 3
    found = [d for d in delays if d is not None]
    return {"rule": rule, "noise": noise, "severity": severity, "onset": onset, "runs": seeds,
            "named": len(found), "delays": delays, "delay_median": statistics.median(found) if found else None,
            "delay_max": max(found) if found else None, "onset_within_3": onsets_right,
            "bound": BOUNDS.get((rule, noise, severity))}


def clean(rule: str, noise: str, seeds: int, steps: int) -> dict[str, Any]:
    alarms = [len(run(rule, noise, 2000 + seed, steps)) for seed in range(seeds)]
    return {"rule": rule, "noise": noise, "runs": seeds, "steps": steps, "false_alarms": sum(alarms),
            "per_1000_steps": round(1000 * sum(alarms) / (seeds * steps), 3)}


def matrix(seeds: int, clean_steps: int) -> dict[str, Any]:
    cells = [cell(rule, noise, severity, onset, seeds)
             for rule, severities in (("mfu_drop", MFU_SEVERITIES), ("dataloader_stall", LOADER_SEVERITIES))
             for noise in NOISES for severity in severities for onset in ONSETS]
    cleans = [clean(rule, noise, seeds, clean_steps) for rule in RULES for noise in NOISES]
    return {"cells": cells, "clean": cleans}


def table(result: dict[str, Any]) -> str:
    lines = ["| rule | noise | severity | onset | named | delay median / max (steps) | bound | onset ±3 |",
             "|---|---|---|---|---|---|---|---|"]
    for c in result["cells"]:
        lines.append(f"| {c['rule']} | {c['noise']} | {c['severity']:.0%} | {c['onset']} | {c['named']}/{c['runs']} | "
                     f"{c['delay_median']} / {c['delay_max']} | {c['bound'] if c['bound'] is not None else '-'} | "
                     f"{c['onset_within_3']}/{c['runs']} |")
    lines += ["", "| rule | noise | clean steps | false alarms | per 1,000 steps |", "|---|---|---|---|---|"]
    for c in result["clean"]:
        lines.append(f"| {c['rule']} | {c['noise']} | {c['runs'] * c['steps']} | {c['false_alarms']} | "
                     f"{c['per_1000_steps']} |")
    return "\n".join(lines)


def main() -> int:
    from harness import parser, write_result  # bench/'s own modules: on sys.path when run as a script
    from machine import machine_facts

    p = parser(__doc__, "drop_rules", {"seeds": 2, "clean_steps": 300})
    p.add_argument("--seeds", type=int, default=5, help="series per cell (default 5)")
    p.add_argument("--clean-steps", type=int, default=1000, help="steps per clean series (default 1000)")
    args = p.parse_args()
    if args.quick:
        args.seeds, args.clean_steps = 2, 300
    started = time.monotonic()
    result = {"benchmark": "drop_rules", "machine": machine_facts(), "seeds": args.seeds,
              "clean_steps": args.clean_steps, **matrix(args.seeds, args.clean_steps)}
    result["run_time_s"] = round(time.monotonic() - started, 1)
    result["complete"] = True
    print(table(result))
    return write_result(args.out, "drop_rules", result, "the drop rules' matrix")


if __name__ == "__main__":
    sys.exit(main())
