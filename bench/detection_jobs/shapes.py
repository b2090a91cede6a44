"""Training jobs in the shapes real jobs have, for the straggler matrix (bench/detection.py --matrix) and its tests.

    torchrun --nproc-per-node 3 bench/detection_jobs/shapes.py --shape fsdp2 --steps 150 \
        --fault-rank 1 --fault-step 40 --factor 1.5 --where backward --truth truth.jsonl

CPU, gloo, one intra-op thread per rank, random regression data; telemetry through the README's lines
only (`telemetry.init()`, `for step, batch in enumerate(run.wrap_loader(loader))`, `with run.step(step)`,
`run.log(step, loss=...)`, `run.close()`). The shapes (`--shape`):

- `ddp`: DistributedDataParallel over a 6-layer MLP with small buckets (several gradient all-reduces per
  step, overlapping the backward), plus the detached loss all-reduced for logging after `backward()` (the
  pattern that hides a straggler from the time-to-the-last-collective signal);
- `fsdp2`: `fully_shard` per layer and on the root (an all-gather per layer forward and backward, a
  reduce-scatter per layer), then `clip_grad_norm_`;
- `sync2`: a hand-written data-parallel loop whose gradients are averaged by two synchronous all-reduces;
- `accum`: DDP with gradient accumulation: 4 micro-batches per step, the first 3 under `no_sync()`;
- `tp`: 4 ranks as 2 tensor-parallel pairs (a second and third process group: a column- then row-parallel
  MLP block, an all-reduce in the pair in the forward and in the backward) times 2 data-parallel replicas
  (gradients all-reduced across the pair's peers, another group).

The fault (`--factor F --where W` on `--fault-rank` from `--fault-step`): that rank's step gets
(F - 1) x its median step before the fault longer, spent in W: `forward` (before the forward), `backward`
(inside the backward, from a gradient hook half-way through the model), `optimizer` (after the optimizer
step: after every collective of the step) or `data` (in its data loader, before the step). `--slowness`
says how: `sleep` (the default: blocked, as a slow device or a lock holds a rank) or `cpu` (CPU work: the
step thread spins for (F - 1) x its median on-CPU time per step before the fault, as a rank with more work
does: on a loaded host it also waits for a CPU in proportion). The rank appends one JSON line to `--truth`
when it begins (the harness measures the delay from it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # runnable from a checkout

import telemetry
from bench.detection_jobs.job import add_job_arguments, leave, report, start_group, start_run, write_truth

SHAPES = ("ddp", "fsdp2", "sync2", "accum", "tp")
WHERE = ("forward", "backward", "optimizer", "data")
WORLD = {"tp": 4}  # ranks a shape needs (others run on any world size)
BATCH = {"ddp": 512, "sync2": 512, "accum": 128, "fsdp2": 128, "tp": 256}  # samples per micro-batch


class Slow:
    """The injected slowness: seconds to sleep (or of CPU work to do) now, 0 until the fault begins (or on
    other ranks)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.where = ""
        self.cpu = False  # --slowness cpu: spin on the calling thread's CPU time instead of sleeping

    def at(self, where: str) -> None:
        if self.seconds and self.where == where:
            self.now()

    def now(self) -> None:
        if not self.cpu:
            time.sleep(self.seconds)
            return
        end = time.thread_time() + self.seconds  # the thread's own CPU time: its work, whatever the host's load
        while time.thread_time() < end:
            pass


class MLP(nn.Module):
    """Layers of width `d`; a gradient hook half-way through the stack runs the `backward` slowness."""

    def __init__(self, slow: Slow, d: int = 512, layers: int = 6) -> None:
        super().__init__()
        self.slow = slow
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(d, d), nn.GELU()) for _ in range(layers))
        self.head = nn.Linear(d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i == len(self.layers) // 2 and x.requires_grad:
                x.register_hook(self._in_backward)
        return self.head(x).squeeze(-1)

    def _in_backward(self, grad: torch.Tensor) -> torch.Tensor:
        self.slow.at("backward")
        return grad


class _ReduceForward(torch.autograd.Function):
    """Row-parallel output: all-reduce in the tensor-parallel group forward, identity backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:  # type: ignore[override]  # autograd passes ctx first
        x = x.clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]  # autograd passes ctx first
        return grad, None


class _ReduceBackward(torch.autograd.Function):
    """Column-parallel input: identity forward, all-reduce of the input's gradient backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:  # type: ignore[override]  # autograd passes ctx first
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]  # autograd passes ctx first
        grad = grad.clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class TPMLP(nn.Module):
    """Blocks of a column-parallel (d -> 4d/tp) and a row-parallel (4d/tp -> d) linear, Megatron-style."""

    def __init__(self, slow: Slow, tp_group: Any, tp: int, d: int = 384, blocks: int = 3) -> None:
        super().__init__()
        self.slow, self.group = slow, tp_group
        self.up = nn.ModuleList(nn.Linear(d, 4 * d // tp) for _ in range(blocks))
        self.down = nn.ModuleList(nn.Linear(4 * d // tp, d, bias=False) for _ in range(blocks))
        self.head = nn.Linear(d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, (up, down) in enumerate(zip(self.up, self.down, strict=True)):
            h = F.gelu(up(_ReduceBackward.apply(x, self.group)))
            x = x + _ReduceForward.apply(down(h), self.group)
            if i == len(self.up) // 2 and x.requires_grad:
                x.register_hook(self._in_backward)
        return self.head(x).squeeze(-1)

    def _in_backward(self, grad: torch.Tensor) -> torch.Tensor:
        self.slow.at("backward")
        return grad


def batches(steps: int, rank: int, seed: int, d: int, slow: Slow, micro: int, size: int) -> Iterator[list[tuple]]:
    """Fresh random regression batches (a fixed random target direction); `data` slowness sleeps here."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    w = torch.randn(d, generator=torch.Generator().manual_seed(seed))
    for _ in range(steps):
        slow.at("data")
        out = []
        for _ in range(micro):
            x = torch.randn(size, d, generator=g)
            out.append((x, x @ w / d ** 0.5 + 0.1 * torch.randn(size, generator=g)))
        yield out


def average_grads(params: list[nn.Parameter], group: Any, size: int, chunks: int = 2) -> None:
    """A hand-written data-parallel gradient average: `chunks` synchronous all-reduces of flat gradients."""
    grads = [p.grad for p in params if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    for part in flat.chunk(chunks):
        dist.all_reduce(part, group=group)  # chunk() views: reduced in place
    flat /= size
    offset = 0
    for g in grads:
        g.copy_(flat[offset: offset + g.numel()].view_as(g))
        offset += g.numel()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="ddp",
                   help=f"one of {', '.join(SHAPES)}, or several comma-separated: run one after another in the "
                        "same processes, each its own telemetry job JOB-SHAPE (--where and --fault-rank then "
                        "give one value each, or one for all)")
    add_job_arguments(p, steps=150, fault_rank=-1, fault_step=40, fault_rank_type=str)  # -1: a clean run
    p.add_argument("--factor", type=float, default=2.0, help="the slow rank's step takes this x its median step")
    p.add_argument("--where", default="forward", help=f"one of {', '.join(WHERE)} (comma-separated: per shape)")
    p.add_argument("--batch", type=int, default=0, help="samples per micro-batch (default: the shape's, BATCH)")
    p.add_argument("--slowness", choices=("sleep", "cpu"), default="sleep",
                   help="sleep: the slow rank blocks; cpu: it does (F - 1) x its median step's CPU work more")
    args = p.parse_args(argv)
    args.shapes = args.shape.split(",")
    wheres = args.where.split(",")
    ranks = str(args.fault_rank).split(",")
    for name, values in (("--where", wheres), ("--fault-rank", ranks)):
        if len(values) not in (1, len(args.shapes)):
            p.error(f"{name} gives {len(values)} values for {len(args.shapes)} shapes")
    args.wheres = wheres * len(args.shapes) if len(wheres) == 1 else wheres
    args.fault_ranks = [int(r) for r in (ranks * len(args.shapes) if len(ranks) == 1 else ranks)]
    for shape in args.shapes:
        if shape not in SHAPES:
            p.error(f"unknown shape {shape!r} (one of {', '.join(SHAPES)})")
    for where in args.wheres:
        if where not in WHERE:
            p.error(f"unknown --where {where!r} (one of {', '.join(WHERE)})")
    return args


@dataclass
class Built:
    raw: nn.Module        # the model's own parameters (DDP's module)
    model: nn.Module      # what the step calls
    d: int = 512          # input width
    micro: int = 1        # micro-batches per step
    dp_group: Any = None  # the data-parallel group of average_grads (None: the world)
    dp_size: int = 1


def build(shape: str, slow: Slow, rank: int, world: int, seed: int) -> Built:
    if shape in ("ddp", "accum"):
        from torch.nn.parallel import DistributedDataParallel as DDP
        raw = MLP(slow)
        return Built(raw, DDP(raw, bucket_cap_mb=1.1), micro=4 if shape == "accum" else 1, dp_size=world)
    if shape == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        raw = MLP(slow)
        mesh = init_device_mesh("cpu", (world,))
        for layer in raw.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(raw, mesh=mesh)
        return Built(raw, raw, dp_size=world)
    if shape == "sync2":
        raw = MLP(slow)
        return Built(raw, raw, dp_size=world)
    # tp: pairs of ranks share a block (tensor parallel); the pairs' peers replicate it (data parallel)
    if world % 2:
        raise SystemExit("--shape tp needs an even world size")
    tp_groups = [dist.new_group([2 * i, 2 * i + 1]) for i in range(world // 2)]
    dp_groups = [dist.new_group(list(range(j, world, 2))) for j in range(2)]
    torch.manual_seed(seed * 100 + rank % 2)  # each tensor-parallel shard its own weights
    raw = TPMLP(slow, tp_groups[rank // 2], 2, d=384)
    return Built(raw, raw, d=384, dp_group=dp_groups[rank % 2], dp_size=world // 2)


def threads_schedstat_ns() -> tuple[int, int]:
    """(on-CPU, run-queue wait) of every thread of this process so far (torch's intra-op and gloo's threads,
    the SDK's sender, the step thread), schedstat's first two fields: logged per step as `bench.oncpu_threads`
    and `bench.runqueue_threads` to see what the SDK's step-thread `runqueue_wait` leaves out
    (bench/detection_jobs/runqueue.py)."""
    oncpu = queued = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/schedstat", "rb") as f:
                fields = f.read().split()
            oncpu, queued = oncpu + int(fields[0]), queued + int(fields[1])
        except (OSError, IndexError, ValueError):
            continue  # a thread that ended meanwhile
    return oncpu, queued


def train(args: argparse.Namespace, shape: str, where: str, fault_rank: int, run: telemetry.Run, rank: int,
          world: int) -> list[float]:
    """One shape's run; returns this rank's step times before the fault (the slowness is relative to them)."""
    slow = Slow()
    m = build(shape, slow, rank, world, args.seed)
    opt = torch.optim.SGD(m.raw.parameters(), lr=0.01)
    own: list[float] = []
    own_cpu: list[float] = []  # the step thread's CPU seconds per step before the fault (--slowness cpu)
    here = rank == fault_rank
    loader = batches(args.steps, rank, args.seed, m.d, slow, m.micro, args.batch or BATCH[shape])
    for step, micro_batches in enumerate(run.wrap_loader(loader)):
        if here and step == args.fault_step:
            slow.cpu = args.slowness == "cpu"
            slow.seconds = (args.factor - 1.0) * statistics.median((own_cpu if slow.cpu else own)[5:]
                                                                   or (own_cpu if slow.cpu else own))
            slow.where = where
            write_truth(args.truth, {"fault": "slow_rank", "rank": rank, "step": step, "time": time.time(),
                                     "shape": shape, "factor": args.factor, "where": where,
                                     "slowness": args.slowness, "extra_s": slow.seconds})
        if here and step == args.fault_step and where == "data":
            slow.now()  # this step's batch was fetched before the fault began
        oncpu, queued = threads_schedstat_ns()
        cpu_start = time.thread_time()
        with run.step(step):
            t0 = time.perf_counter()
            slow.at("forward")
            total = 0.0
            for i, (x, y) in enumerate(micro_batches):
                last = i == len(micro_batches) - 1
                if shape == "accum" and not last:
                    with m.model.no_sync():  # type: ignore[operator]  # DDP's context manager
                        loss = F.mse_loss(m.model(x), y) / m.micro
                        loss.backward()
                else:
                    loss = F.mse_loss(m.model(x), y) / m.micro
                    loss.backward()
                total += loss.item()
            if shape == "ddp":
                logged = torch.tensor([total])
                dist.all_reduce(logged)  # the detached loss, averaged for logging
                total = logged.item() / world
            elif shape == "sync2":
                average_grads(list(m.raw.parameters()), None, world)
            elif shape == "tp":
                average_grads(list(m.raw.parameters()), m.dp_group, m.dp_size)
            elif shape == "fsdp2":
                torch.nn.utils.clip_grad_norm_(m.raw.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            slow.at("optimizer")
            elapsed = time.perf_counter() - t0
            if step < args.fault_step:
                own.append(elapsed)
                own_cpu.append(time.thread_time() - cpu_start)
            run.log(step, loss=total)
        oncpu_after, queued_after = threads_schedstat_ns()
        # (the step thread's own on-CPU time is the SDK's `oncpu_time` now: `bench.oncpu_step` before it)
        run.log(step, **{"bench.runqueue_threads": (queued_after - queued) / 1e9,
                         "bench.oncpu_threads": (oncpu_after - oncpu) / 1e9})
    return own


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, world = start_group()
    several = len(args.shapes) > 1
    for shape, where, fault_rank in zip(args.shapes, args.wheres, args.fault_ranks, strict=True):
        job = f"{args.job}-{shape}" if several and args.job else args.job
        run = start_run(job, args.seed)
        own = train(args, shape, where, fault_rank, run, rank, world)
        report(run, rank, own, args, **({"shape": shape} if several else {}))
        dist.barrier()  # every rank done with this shape before the next one's groups and collectives
    return leave()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip torch.distributed's static teardown (see examples/train_ddp.py)
