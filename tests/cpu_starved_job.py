"""A torchrun job that uses only the README's lines, one rank of which a neighbour starves of CPU, for
tests/test_cpu_starved_torchrun.py.

A small DDP MLP on gloo; every rank spends --work-s of CPU time per step (a busy loop on its own thread's CPU
clock, so the work is the same however long it waits for a CPU). From step --starve-from, rank --starved-rank
pins itself to one CPU and starts --hogs busy processes pinned to the same CPU (its neighbours): it still needs
--work-s of CPU per step, and now waits on the run queue for most of its step. The hogs end with the job.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
from pathlib import Path

import torch

import telemetry
from torchrun_tree import end_rank, tiny_ddp


def hog(cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})
    while True:
        pass


def busy(seconds: float) -> None:
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--job", required=True)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--starved-rank", type=int, default=-1)
    p.add_argument("--starve-from", type=int, default=10)
    p.add_argument("--hogs", type=int, default=3)
    p.add_argument("--work-s", type=float, default=0.02)
    p.add_argument("--truth", type=Path, default=None, help="write when the neighbours came (JSON) here")
    args = p.parse_args()

    rank, model, opt = tiny_ddp()
    x, y = torch.randn(16, 32), torch.randn(16, 1)
    hogs: list[multiprocessing.Process] = []
    run = telemetry.init(job=args.job)
    try:
        for step in range(args.steps):
            if rank == args.starved_rank and step == args.starve_from:
                cpu = max(os.sched_getaffinity(0))
                os.sched_setaffinity(0, {cpu})  # this thread (the step thread) and what it starts from now
                context = multiprocessing.get_context("fork")
                hogs = [context.Process(target=hog, args=(cpu,), daemon=True) for _ in range(args.hogs)]
                for h in hogs:
                    h.start()
                if args.truth is not None:
                    args.truth.write_text(json.dumps({"rank": rank, "step": step, "time": time.time()}))
            with run.step(step):
                busy(args.work_s)
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                run.log(step, loss=loss.detach())
    finally:
        for h in hogs:
            h.kill()
            h.join()
    end_rank(run, rank)


if __name__ == "__main__":
    main()
