#!/usr/bin/env python
"""The straggler rules on a loaded host, modelled: host load x severity x where the slowness is (issue 24).

    python bench/detection_jobs/cpu_work.py [--seeds 4] [--out bench/results]

On a host where every runnable thread gets 1 / L of a CPU (L runnable threads per CPU) a thread queues (L - 1)
times its CPU time. Each job: WORLD synchronous ranks, rank SLOW slowed from ONSET by a factor f, as `kind` says:

- `cpu`: f x the CPU work (a real CPU-bound straggler: more data, a slower code path): it takes f x L as long
  and queues (f - 1)(L - 1) x its CPU time more than the median rank, (L - 1) / L of its lead;
- `sleep`: blocked for (f - 1) x the median step, as bench/detection_jobs/shapes.py injects slowness, queueing a
  little when it wakes on a busy host (up to 30 % of its sleep x (L - 1) / L);
- `descheduled`: the same CPU work as its peers and its whole lead run-queue wait (a neighbour took its CPU): a
  host problem, never a straggler.

Noise: each rank's CPU work +-4 %, its run-queue wait +-10 % around its share, a few ms of transfer, and on
15 % of the steps one rank descheduled by up to half a step (its run-queue wait says so: the scheduler's bursts
on the loaded bench machine). The rows are built as the root finalises them (exact summaries) - step_time,
oncpu_time (unless `oncpu` is off: an SDK from before it), runqueue_wait, collective_wait and the agent's
running wait shares (collectors/agent/wait_share.py, one agent for every rank) - and go through the detectors'
suite (the straggler rule beside cpu_starved). Prints, per cell, the steps from the onset to the first
straggler event on each seed ("-" none), with and without the on-CPU times, and the false alarms of clean jobs
(`--clean-seeds` per load, `--clean-steps` each), and writes detection_cpu_work.json.
tests/test_straggler_cpu_work.py runs the same model.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: when run as a script

from bench.harness import write_json
from collectors.agent.wait_share import WaitShares, excess_queued
from collectors.common.keys import Key
from collectors.common.rows import Row
from collectors.detectors import EventLog
from collectors.detectors.suite import Detectors, DetectorsConfig
from telemetry.names import ONCPU_METRIC, RUNQUEUE_METRIC, WAIT_METRIC, WAIT_SHARE_METRIC
from telemetry.summary import Summary

JOB = "cpu-work"
WORLD, SLOW, ONSET, CPU_S = 4, 2, 30, 0.1
KINDS = ("cpu", "sleep", "descheduled")
FACTORS = (2.0, 1.5, 1.2, 1.1)
BOUND = {2.0: 3, 1.5: 5, 1.2: 30, 1.1: 100}  # the issue's: steps from the onset
LOADS = (1.0, 2.0, 3.0, 5.0, 8.0)


def _row(metric: str, step: int, values: np.ndarray) -> Row:
    summary = Summary.from_arrays(values.astype(np.float64), np.arange(len(values), dtype=np.int64), time.time_ns())
    return Row(Key(JOB, metric, step, 0), len(values), summary, 0, time.time_ns())


def slow_rank(world: int) -> int:
    """The rank slowed in a job of `world` ranks: SLOW, or the last rank of a smaller world."""
    return min(SLOW, world - 1)


def simulate(kind: str, load: float, factor: float, seed: int, steps: int, oncpu: bool = True,
             settings: dict[str, Any] | None = None, shuffled: bool = False, world: int = WORLD,
             oncpu_hook: Callable[[int, np.ndarray], np.ndarray] | None = None,
             slow: tuple[int, ...] | None = None) -> list[dict[str, Any]]:
    """One job of `world` ranks on a host of `load` runnable threads per CPU, rank slow_rank(world) slowed from
    ONSET as `kind` says by `factor`; the events the detectors raised (oldest first). `shuffled`: each step's rows
    in a random order, as the root hands a flush's windows (else step_time, run-queue waits, waits, shares, on-CPU
    times). `oncpu_hook(step, values)` replaces the on-CPU row's values as the ranks report them (a broken or
    hostile client). `slow`: the ranks slowed alike (default: slow_rank(world) alone)."""
    slowed = list(slow) if slow is not None else [slow_rank(world)]
    rng = np.random.default_rng(seed)
    shares = WaitShares()
    log = EventLog(None)
    suite = Detectors(log, config=DetectorsConfig.from_mapping(settings or {}))
    for step in range(steps):
        cpu = CPU_S * np.exp(rng.normal(0, 0.04, world))
        slept = np.zeros(world)
        held = np.zeros(world)
        if step >= ONSET:
            if kind == "cpu":
                cpu[slowed] *= factor
            elif kind == "sleep":
                slept[slowed] = (factor - 1.0) * CPU_S * load
            elif kind == "descheduled":
                held[slowed] = (factor - 1.0) * CPU_S * load
        queued = (load - 1.0) * cpu * np.exp(rng.normal(0, 0.1, world)) + held + np.abs(rng.normal(0.002, 0.001, world))
        for rank in slowed:
            if slept[rank] and load > 1.0:  # a sleeper waking on a busy host waits for a CPU before it runs again
                queued[rank] += rng.uniform(0.0, 0.3) * slept[rank] * (load - 1.0) / load
        if rng.random() < 0.15:
            queued[rng.integers(world)] += 0.5 * CPU_S * load * rng.random()
        busy = cpu + queued + slept
        wait = busy.max() - busy + 0.01 * np.exp(rng.normal(0, 0.1, world))
        excess = excess_queued(dict(enumerate(queued)), dict(enumerate(busy)))
        share = [shares.update(JOB, rank, step, wait[rank], busy[rank], excess[rank]) for rank in range(world)]
        rows = [_row("step_time", step, busy + wait), _row(RUNQUEUE_METRIC, step, queued),
                _row(WAIT_METRIC, step, wait), _row(WAIT_SHARE_METRIC, step, np.array(share, dtype=np.float64))]
        if oncpu:
            rows.append(_row(ONCPU_METRIC, step, cpu if oncpu_hook is None else oncpu_hook(step, cpu.copy())))
        suite.on_rows([rows[i] for i in rng.permutation(len(rows))] if shuffled else rows)
    return log.query(JOB, limit=1000)


def stragglers(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == "straggler"]


def cell(kind: str, load: float, factor: float, seed: int, oncpu: bool, world: int = WORLD,
         extra: int = 12) -> dict[str, Any]:
    """One job scored: steps from the onset to its first straggler event (None: none), whether every event named
    the slow rank, whether the last one was open at the end, and whether cpu_starved named the slow rank."""
    events = simulate(kind, load, factor, seed, ONSET + BOUND[factor] + extra, oncpu=oncpu, world=world)
    found = stragglers(events)
    slow = slow_rank(world)
    return {"kind": kind, "load": load, "factor": factor, "seed": seed, "oncpu": oncpu, "world": world,
            "named_after": found[0]["detail"]["detected_step"] - ONSET if found else None,
            "exact": all(e["ranks"] == [slow] for e in found), "open_at_end": bool(found) and found[-1]["status"] == "open",
            "starved": any(e["kind"] == "cpu_starved" and slow in e["ranks"] for e in events)}


def clean(load: float, seed: int, world: int, steps: int) -> dict[str, Any]:
    """One clean job (nobody slowed: `cpu` at factor 1, the same noise and descheduling bursts): its straggler
    events, every one a false alarm."""
    found = stragglers(simulate("cpu", load, 1.0, seed, steps, world=world))
    return {"load": load, "seed": seed, "world": world, "steps": steps,
            "false_alarms": [{"ranks": e["ranks"], "step": e["detail"]["detected_step"],
                              "signal": e["detail"]["opened_on"]} for e in found]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=4, help="noise seeds per cell (default 4)")
    p.add_argument("--world", type=int, default=WORLD, help=f"ranks per job (default {WORLD}; another world writes "
                   "detection_cpu_work_world<N>.json)")
    p.add_argument("--extra", type=int, default=12, help="steps each job runs past its severity's bound (default 12)")
    p.add_argument("--clean-seeds", type=int, default=4, help="clean jobs per load (default 4; seeds after the "
                   "fault cells' own, so no clean job repeats a fault job's noise)")
    p.add_argument("--clean-steps", type=int, default=300, help="steps per clean job (default 300)")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results")
    args = p.parse_args(argv)
    logging.disable(logging.CRITICAL)
    if args.world < 2:
        p.error("--world must be at least 2 (a job of one rank has no peer)")
    cells = [cell(kind, load, factor, seed, oncpu, args.world, args.extra) for oncpu in (False, True) for kind in KINDS for factor in FACTORS
             for load in LOADS for seed in range(args.seeds)]
    summary: dict[str, dict[str, Any]] = {}
    for oncpu in (False, True):
        print(f"on-CPU times {'used' if oncpu else 'not logged'}: steps from the onset to the first straggler event "
              "per seed ('-' none; ! a wrong rank; c closed before the end; s cpu_starved named it)")
        for kind in KINDS:
            for factor in FACTORS:
                line = []
                for load in LOADS:
                    mine = [c for c in cells if (c["oncpu"], c["kind"], c["factor"], c["load"]) == (oncpu, kind, factor, load)]
                    marks = ",".join(("-" if c["named_after"] is None else str(c["named_after"]))
                                     + ("" if c["exact"] else "!") + ("c" if c["named_after"] is not None and not c["open_at_end"] else "")
                                     + ("s" if c["starved"] else "") for c in mine)
                    line.append(f"L{load:g}:{marks}")
                    bound = BOUND[factor]
                    key = f"{'oncpu' if oncpu else 'none'} {kind} {factor:g}x"
                    entry = summary.setdefault(key, {"cells": 0, "in_time": 0, "named": 0})
                    entry["cells"] += len(mine)
                    entry["named"] += sum(c["named_after"] is not None for c in mine)
                    entry["in_time"] += sum(c["named_after"] is not None and c["named_after"] <= bound and c["exact"]
                                            for c in mine)
                print(f"  {kind:11s} {factor:g}x  " + "  ".join(line))
    print("cells named (in the issue's bound) / cells, per kind and severity:")
    for key, entry in summary.items():
        print(f"  {key:28s} {entry['named']}/{entry['cells']} ({entry['in_time']} in time)")
    clean_jobs = [clean(load, args.seeds + seed, args.world, args.clean_steps) for load in LOADS
                  for seed in range(args.clean_seeds)]
    alarms = sum(len(j["false_alarms"]) for j in clean_jobs)
    steps = sum(j["steps"] for j in clean_jobs)
    print(f"clean jobs: {alarms} false alarms in {steps} clean steps ({len(clean_jobs)} jobs, loads "
          f"{', '.join(f'{load:g}' for load in LOADS)})" + "".join(
              f"\n  L{j['load']:g} seed {j['seed']}: {j['false_alarms']}" for j in clean_jobs if j["false_alarms"]))
    name = "detection_cpu_work" + ("" if args.world == WORLD else f"_world{args.world}")
    write_json(args.out / f"{name}.json",
               {"benchmark": "detection_cpu_work", "world": args.world, "extra": args.extra, "seeds": args.seeds, "loads": LOADS,
                "bound": {f"{k:g}x": v for k, v in BOUND.items()}, "summary": summary, "cells": cells,
                "clean": {"false_alarms": alarms, "steps": steps, "jobs": clean_jobs}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
