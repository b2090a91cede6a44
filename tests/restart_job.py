"""A torchrun job that checkpoints, fails and resumes, for tests/test_restarts_torchrun.py (issue 17).

Each rank logs `loss` = step + 1000 * (torchelastic restart count) + --tag, under run.step, with a gloo
all-reduce per step. Rank 0 writes the step to --checkpoint every --every steps; a start resumes after the
checkpoint's step. With --fail-rank R --fail-step S, rank R of the first launch (restart count 0) closes its
run and exits 1 on entering step S, so torchrun (--max-restarts) starts every rank again. Each rank appends
(restart count, step, end time ns) per step to --times, for the test's truth.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist

import telemetry
from torchrun_tree import end_rank


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("--times", type=Path, required=True)
    p.add_argument("--every", type=int, default=4)
    p.add_argument("--fail-rank", type=int, default=-1)
    p.add_argument("--fail-step", type=int, default=-1)
    p.add_argument("--tag", type=float, default=0.0)
    p.add_argument("--pace-s", type=float, default=0.05)
    args = p.parse_args()

    torch.set_num_threads(1)
    rank, restart = int(os.environ["RANK"]), int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    # The process group meets in a file store of its own per restart: through torchrun's store, a restarted
    # gloo group here often read the previous attempt's addresses ("Gloo connectFullMesh ... Connection
    # refused", seen without telemetry too, 2 launches in 4). Telemetry still agrees on the attempt through
    # torchrun's store (telemetry.init() below).
    store = dist.FileStore(str(args.checkpoint.with_name(f"{args.checkpoint.name}.pg{restart}")),
                           int(os.environ["WORLD_SIZE"]))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=int(os.environ["WORLD_SIZE"]),
                            timeout=datetime.timedelta(seconds=60))
    start = int(args.checkpoint.read_text()) + 1 if args.checkpoint.exists() else 1
    run = telemetry.init()
    with args.times.open("a") as times:  # written as it goes: the other ranks of a failed launch are killed
        for step in range(start, args.steps + 1):
            if restart == 0 and rank == args.fail_rank and step == args.fail_step:
                run.close(timeout=10)
                os._exit(1)
            with run.step(step):
                time.sleep(args.pace_s)
                dist.all_reduce(torch.ones(4))
                run.log(step, loss=step + 1000.0 * restart + args.tag)
            times.write(json.dumps([restart, step, time.time_ns()]) + "\n")
            times.flush()
            if rank == 0 and step % args.every == 0:
                args.checkpoint.write_text(str(step))
    end_rank(run, rank)


if __name__ == "__main__":
    main()
