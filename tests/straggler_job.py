"""A torchrun job that uses only the README's three lines, for tests/test_straggler_torchrun.py.

A small DDP MLP on random data (gloo, CPU). With --slow-rank R --slow-from S, rank R sleeps
--slow-s seconds before its forward (or after its optimizer step) from step S on: under DDP's synchronous all-reduce every rank's
wall step_time grows by the same amount, so only the SDK's automatic collective_arrival names it.
"""

from __future__ import annotations

import argparse
import time

import torch

import telemetry
from torchrun_tree import end_rank, tiny_ddp


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--job", required=True)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-from", type=int, default=10)
    p.add_argument("--slow-s", type=float, default=0.3)
    p.add_argument("--slow-where", choices=("forward", "after-update"), default="forward",
                   help="the slow rank's extra time: before its forward, or after its optimizer step")
    p.add_argument("--pace-s", type=float, default=0.05, help="every rank's own work per step (sleep)")
    args = p.parse_args()

    rank, model, opt = tiny_ddp()
    x, y = torch.randn(16, 32), torch.randn(16, 1)

    run = telemetry.init(job=args.job)
    for step in range(args.steps):
        with run.step(step):
            slow = rank == args.slow_rank and step >= args.slow_from
            time.sleep(args.pace_s)
            if slow and args.slow_where == "forward":
                time.sleep(args.slow_s)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if slow and args.slow_where == "after-update":
                time.sleep(args.slow_s)  # after the step's last collective: the others wait at the next one
            run.log(step, loss=loss.detach())
    end_rank(run, rank)


if __name__ == "__main__":
    main()
