"""Torchrun jobs against a real root and agent, for the tests that run them (gloo, CPU).

The services and the launching are bench/torchrun_jobs.py's, shared with the benches (`root_and_agent`,
`torchrun`: re-exported here); what is the tests' own: `run_job` (a job run to its end, failing the test
otherwise: `JobFailed`, with the job's whole stdout), `run_setups` (a job script's set-ups in turn, each one's failure
printed as a JSON line naming it), `tiny_ddp`, the small gloo DDP model the job scripts train, and `end_rank`, with which they end their
ranks, whose done line `durable_ranks` counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

from bench.torchrun_jobs import REPO, job_env, root_and_agent, torchrun, torchrun_argv
from collectors.demo.train import kill_job

__all__ = ["REPO", "JobFailed", "durable_ranks", "end_rank", "root_and_agent", "run_job", "run_setups", "tiny_ddp", "torchrun"]


class JobFailed(AssertionError):
    """A torchrun job that failed or timed out; `out` is its whole stdout, so that a caller can still read every
    line the ranks printed before it failed (the message holds only its end)."""

    def __init__(self, message: str, out: str) -> None:
        super().__init__(message)
        self.out = out


def run_job(world: int, script: Path, args: list[str], agent: str, job: str, timeout: float,
            launcher: tuple[str, ...] = (), env: dict[str, str] | None = None) -> str:
    """Run `script` under torchrun to its end and return its stdout; a job that fails, or runs past `timeout` s
    (then it is killed: torchrun and every rank of `job`), fails the test with the end of its output (`JobFailed`,
    which carries the whole stdout)."""
    proc = subprocess.Popen(torchrun_argv(world, script, args, launcher), env=job_env(agent, env), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_job(proc, job)
        out, err = proc.communicate(timeout=10)
        raise JobFailed(f"job timed out\n{out[-3000:]}\n{err[-4000:]}", out) from None
    if proc.returncode != 0:
        raise JobFailed(f"job failed ({proc.returncode})\n{out[-3000:]}\n{err[-4000:]}", out)
    return out


def run_setups(frameworks: Iterable[str], run: Callable[[str], None], rank: int) -> None:
    """A job script's loop over its set-ups: `run(framework)` for each in turn; one that raises prints
    {"rank", "framework", "error": its traceback} (what `framework_ranks` names the set-up's failure by: torchrun's
    stderr holds at most another rank's knock-on error), then re-raises."""
    for framework in frameworks:
        try:
            run(framework)
        except BaseException:
            print(json.dumps({"rank": rank, "framework": framework, "error": traceback.format_exc()}), flush=True)
            raise


def durable_ranks(out: str) -> int:
    """How many ranks printed `end_rank`'s done line with everything they logged durable at the root."""
    return out.count('"durable": true')


def tiny_ddp() -> tuple[int, Any, Any]:
    """Join the gloo process group and build the jobs' model: a seeded DDP MLP (32 -> 64 -> 1, one gradient
    bucket) on one thread, and its SGD optimizer; returns (rank, model, optimizer)."""
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
    return dist.get_rank(), model, torch.optim.SGD(model.parameters(), lr=0.01)


def end_rank(run: Any, rank: int, timeout: float = 60.0) -> NoReturn:
    """A job script's last lines: close `run` (up to `timeout` s for its data to be durable), leave the process
    group, print the done line, exit (3 when not durable; os._exit: no interpreter teardown left to hang)."""
    import torch.distributed as dist

    ok = run.close(timeout=timeout)
    dist.destroy_process_group()
    print(f'{{"event": "done", "rank": {rank}, "durable": {str(ok).lower()}}}', flush=True)
    os._exit(0 if ok else 3)
