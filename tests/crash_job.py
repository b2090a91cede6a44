"""A torchrun job for tests/test_crash_torchrun.py and bench/crash.py: the README's lines only, and one way to die.

Each step every rank takes a batch from a DataLoader (one worker process) and all-reduces a float32[4] (gloo,
CPU). At step --fault-step rank --fault-rank ends as --fault says; the other ranks die of it in their next
collective (connection reset) or are stopped by torchrun (SIGTERM), as in real jobs:
  raise     raises RuntimeError("CUDA out of memory ...") in the main thread
  loader    its DataLoader worker raises (the main thread re-raises it: "Caught ValueError in DataLoader worker")
  loader_kill  its DataLoader worker is SIGKILLed (as the OOM killer kills a worker: "DataLoader worker ... exited
            unexpectedly", the signal only in the traceback's chained cause)
  sigkill   SIGKILLs itself (as the kernel's OOM killer would)
  abort     calls abort() (a C++ terminate, a failed CHECK)
  segv      reads address 0 through ctypes (SIGSEGV)
  mismatch  all-reduces a 1000-element tensor where the others all-reduce 4 (gloo aborts a rank)
  exit3     calls sys.exit(3)
  none      finishes cleanly (run.close(), exit 0)
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

import telemetry

FAULTS = ("none", "raise", "loader", "loader_kill", "sigkill", "abort", "segv", "mismatch", "exit3")


class Batches(Dataset):
    def __init__(self, n: int, poison: int | None, kill: bool = False) -> None:
        self.n, self.poison, self.kill = n, poison, kill

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == self.poison and self.kill:
            os.kill(os.getpid(), signal.SIGKILL)
        if i == self.poison:
            raise ValueError(f"corrupt record {i} in shard 7 (injected)")
        return torch.full((4,), float(i))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--job", required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--fault-rank", type=int, default=1)
    p.add_argument("--fault-step", type=int, default=12)
    p.add_argument("--step-s", type=float, default=0.02)
    args = p.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    run = telemetry.init(job=args.job)
    # The test's jobs die within a second or two of starting; a real job lives long past its SDK's first connection.
    # A rank that dies before it connected is known to nobody but its launcher.
    run.wait_connected(60)
    faulty = rank == args.fault_rank
    poison = args.fault_step if faulty and args.fault in ("loader", "loader_kill") else None
    loader = DataLoader(Batches(args.steps, poison, kill=args.fault == "loader_kill"), batch_size=None, num_workers=1)
    for step, batch in enumerate(loader):
        with run.step(step):
            if faulty and step == args.fault_step and not args.fault.startswith("loader"):
                print(json.dumps({"event": "fault", "fault": args.fault, "rank": rank, "step": step,
                                  "time": time.time()}), flush=True)
                if args.fault == "raise":
                    raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (injected)")
                if args.fault == "sigkill":
                    os.kill(os.getpid(), signal.SIGKILL)
                if args.fault == "abort":
                    os.abort()
                if args.fault == "segv":
                    ctypes.string_at(0)
                if args.fault == "exit3":
                    sys.exit(3)
                if args.fault == "mismatch":
                    batch = torch.ones(1000)
            if faulty and args.fault.startswith("loader") and step == args.fault_step - 1:
                print(json.dumps({"event": "fault", "fault": args.fault, "rank": rank, "step": step + 1,
                                  "time": time.time()}), flush=True)
            dist.all_reduce(batch)
            time.sleep(args.step_s)
            run.log(step, loss=float(batch.sum()) / (step + 1))
    ok = run.close(timeout=30)
    dist.destroy_process_group()
    print(json.dumps({"event": "done", "rank": rank, "durable": ok}), flush=True)


if __name__ == "__main__":
    main()
