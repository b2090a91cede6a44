"""A torchrun job written with the README's lines only (telemetry.init, run.wrap_loader, run.step, run.log), for
tests/test_drop_torchrun.py: a DDP MLP on random data (gloo, CPU) that logs its MFU as a user would (the step's
FLOPs over its wall time and a peak: here a nominal one, as TELEMETRY_PEAK_FLOPS would give on a CPU).

--slow-rank R --slow-from S --slow-s X: rank R computes X s longer per step from step S (every rank waits for
it in the all-reduce: the job's MFU falls). --loader-rank R --loader-from S --loader-s X: rank R's data loader
takes X s longer per batch from batch S (the others wait for it too).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator

import torch

import telemetry
from torchrun_tree import end_rank, tiny_ddp

FLOPS_PER_STEP = 1e9   # nominal: MFU's scale does not matter to the rule, its changes do
PEAK_FLOPS = 1e11


def batches(rank: int, args: argparse.Namespace) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    for i in range(args.steps):
        if rank == args.loader_rank and i >= args.loader_from:
            time.sleep(args.loader_s)
        yield torch.randn(16, 32), torch.randn(16, 1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--job", required=True)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--pace-s", type=float, default=0.04, help="every rank's own work per step (sleep)")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-from", type=int, default=25)
    p.add_argument("--slow-s", type=float, default=0.12)
    p.add_argument("--loader-rank", type=int, default=-1)
    p.add_argument("--loader-from", type=int, default=25)
    p.add_argument("--loader-s", type=float, default=0.1)
    args = p.parse_args()

    rank, model, opt = tiny_ddp()

    run = telemetry.init(job=args.job)
    for step, (x, y) in enumerate(run.wrap_loader(batches(rank, args))):
        with run.step(step):
            t0 = time.perf_counter()
            time.sleep(args.pace_s)
            if rank == args.slow_rank and step >= args.slow_from:
                time.sleep(args.slow_s)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            mfu = FLOPS_PER_STEP / (time.perf_counter() - t0) / PEAK_FLOPS
            run.log(step, loss=loss.detach(), mfu=mfu)
    end_rank(run, rank)


if __name__ == "__main__":
    main()
