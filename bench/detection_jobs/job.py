"""What every detection-bench training job does the same way: its common arguments, its start (one intra-op
thread, gloo, `telemetry.init()`, the same seed on every rank), the truth line it appends when its fault
begins, and its end (`run.close()`, the `done` line bench/detection_jobs/logs.py reads, a barrier).

train.py (the two models x five faults) and shapes.py (the straggler matrix's shapes) differ in their models
and faults only; the harness (bench/detection.py) relies on this part being the same in both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import telemetry


def add_job_arguments(p: argparse.ArgumentParser, steps: int, fault_rank: int, fault_step: int,
                      fault_rank_type: Callable[[str], Any] = int) -> None:
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--job", default=None, help="telemetry job id [default: TORCHELASTIC_RUN_ID]")
    p.add_argument("--fault-rank", type=fault_rank_type, default=fault_rank)
    p.add_argument("--fault-step", type=int, default=fault_step)
    p.add_argument("--truth", type=Path, default=None, help="append the injected fault here (JSON line)")
    p.add_argument("--close-timeout", type=float, default=30.0)


def start_group() -> tuple[int, int]:
    """(rank, world): one intra-op thread, the process group up on gloo."""
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    return rank, world


def start_run(job: str | None, seed: int) -> telemetry.Run:
    """Telemetry through the README's `telemetry.init()`, and the same initial weights on every rank."""
    run = telemetry.init(job=job)
    torch.manual_seed(seed)
    return run


def start(args: argparse.Namespace) -> tuple[int, int, telemetry.Run]:
    """(rank, world, run): the process group up, then the job's run."""
    rank, world = start_group()
    return rank, world, start_run(args.job, args.seed)


def write_truth(path: Path | None, record: dict[str, Any]) -> None:
    """The injected fault as one JSON line (the harness measures the detection delay from its `time`)."""
    if path is not None:
        with path.open("a") as f:
            f.write(json.dumps(record) + "\n")


def report(run: telemetry.Run, rank: int, own: list[float], args: argparse.Namespace, **extra: Any) -> None:
    """Closes the run and prints the `done` line: durable or not, the SDK's counters, the median step before
    the fault, and `extra`."""
    durable = run.close(timeout=args.close_timeout)
    print(json.dumps({"event": "done", "rank": rank, "durable": durable, "stats": run.stats, **extra,
                      "median_step_s": statistics.median(own) if own else None}), flush=True)


def leave() -> int:
    """Leaves the process group with the others."""
    dist.barrier()
    dist.destroy_process_group()
    return 0


def finish(run: telemetry.Run, rank: int, own: list[float], args: argparse.Namespace, **extra: Any) -> int:
    """The run's `report`, then `leave`."""
    report(run, rank, own, args, **extra)
    return leave()
