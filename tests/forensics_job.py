"""A torchrun job for tests/test_forensics_torchrun.py: the README's lines only, and one injected fault.

Each step every rank loads a batch (`load_batch`), then all-reduces a float32[4] and an int32[4] tensor
(gloo, CPU): the same number of bytes, so that gloo itself cannot tell one from the other. --fault names what rank --fault-rank does at step --fault-step:
  block   blocks forever inside `load_batch` (waiting on an event nobody sets: the GIL is released)
  longer  all-reduces a 5-element tensor instead of the 4-element one (gloo returns garbage, then hangs)
  skip    skips the float32 all-reduce (its later collectives pair with the others' earlier ones: gloo
          reduces int32 bytes as float32 and the other way round, silently)
  stop    SIGSTOPs itself inside `load_batch` (cannot answer anything; the agent must look from outside)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time

import torch
import torch.distributed as dist

import telemetry
from torchrun_tree import end_rank


def note_fault(fault: str, step: int) -> None:
    """The fault's wall time, for bench/forensics.py (detection delay): one JSON line on stdout."""
    print(json.dumps({"event": "fault", "fault": fault, "step": step, "time": time.time()}), flush=True)


def load_batch(step: int, fault: str, faulty: bool) -> torch.Tensor:
    if faulty:
        note_fault(fault, step)
    if faulty and fault == "block":
        threading.Event().wait()  # a data source that never answers
    if faulty and fault == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(0.02)
    return torch.full((4,), float(step))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--job", required=True)
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--fault", choices=("none", "block", "longer", "skip", "stop"), default="none")
    p.add_argument("--fault-rank", type=int, default=2)
    p.add_argument("--fault-step", type=int, default=10)
    args = p.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    run = telemetry.init(job=args.job)
    for step in range(args.steps):
        with run.step(step):
            faulty = rank == args.fault_rank and step == args.fault_step
            batch = load_batch(step, args.fault, faulty)
            first = torch.ones(5) if faulty and args.fault == "longer" else batch.clone()
            if not (faulty and args.fault == "skip"):
                dist.all_reduce(first)
            second = torch.ones(4, dtype=torch.int32)
            dist.all_reduce(second)
            run.log(step, loss=float(first.sum()) / (step + 1))
    end_rank(run, rank, timeout=30)


if __name__ == "__main__":
    main()
