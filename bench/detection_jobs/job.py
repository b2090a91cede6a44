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
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

import telemetry


def add_job_arguments(p: argparse.ArgumentParser, steps: int, fault_rank: int, fault_step: int) -> None:
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--job", default=None, help="telemetry job id [default: TORCHELASTIC_RUN_ID]")
    p.add_argument("--fault-rank", type=int, default=fault_rank)
    p.add_argument("--fault-step", type=int, default=fault_step)
    p.add_argument("--truth", type=Path, default=None, help="append the injected fault here (JSON line)")
    p.add_argument("--close-timeout", type=float, default=30.0)


def start(args: argparse.Namespace) -> tuple[int, int, telemetry.Run]:
    """(rank, world, run): the process group up on gloo, telemetry through the README's `telemetry.init()`,
    the same initial weights everywhere."""
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    run = telemetry.init(job=args.job)
    torch.manual_seed(args.seed)
    return rank, world, run


def write_truth(path: Path | None, record: dict[str, Any]) -> None:
    """The injected fault as one JSON line (the harness measures the detection delay from its `time`)."""
    if path is not None:
        with path.open("a") as f:
            f.write(json.dumps(record) + "\n")


def finish(run: telemetry.Run, rank: int, own: list[float], args: argparse.Namespace, **extra: Any) -> int:
    """Closes the run, prints the `done` line (durable or not, the SDK's counters, the median step before the
    fault) and leaves the process group with the others."""
    durable = run.close(timeout=args.close_timeout)
    print(json.dumps({"event": "done", "rank": rank, "durable": durable, "stats": run.stats, **extra,
                      "median_step_s": statistics.median(own) if own else None}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0
