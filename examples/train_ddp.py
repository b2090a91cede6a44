"""A small causal transformer LM trained with DDP on synthetic tokens, logging through the telemetry SDK.

    torchrun --nproc_per_node 4 examples/train_ddp.py --steps 200            # CPU: gloo
    torchrun --nproc_per_node 8 examples/train_ddp.py --steps 200            # GPUs: nccl (auto)

Each rank logs, per step, to the node agent at TELEMETRY_AGENT (or --agent):
loss and grad_norm (tensors, read by the SDK's thread without a sync), step_time (``run.step``),
dataloader_wait (``run.wrap_loader``) and mfu (when the peak FLOP/s is known: a tabulated GPU,
TELEMETRY_PEAK_FLOPS or --peak-flops). Heartbeats carry the default group's collective progress
(``telemetry.torch.integration.attach``).

Fault injection, to see the telemetry react:
  --slow-rank R --slow-factor F [--slow-from S] [--slow-until S]
                                                 rank R sleeps so that its own work takes F x
  --hang-step S --hang-rank R [--hang-seconds T] rank R stalls T s (alive, heartbeating) before step S;
                                                 every other rank blocks in step S's all-reduce
  --bad-batch-step S [--bad-batch-rank R]       step S trains on random labels: a loss spike
  --nan-step S --nan-rank R                     rank R's logits (so its loss) are NaN at step S;
                                                 the update is skipped on every rank (no sync)
Comparisons (used by bench/sdk_overhead.py):
  --no-telemetry        no SDK at all
  --no-sync-clock       the SDK without SyncWaitClock (its DDP comm hook; no sync_wait / compute_time)
  --allgather-metrics   the common alternative: all_gather every rank's metrics on the
                         training thread every step and reduce them on rank 0
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

# Runnable from a checkout without installing: `torchrun examples/train_ddp.py`.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import telemetry
from telemetry.torch import flops_per_step, grad_norm, peak_flops
from telemetry.torch.integration import SyncWaitClock, attach, enable_flight_recorder

# ---------------------------------------------------------------- model


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab: int, seq_len: int, d_model: int, heads: int, layers: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(seq_len, d_model) * 0.02)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


# ---------------------------------------------------------------- data


class ArithmeticTokens(Dataset):
    """Sequences t_i = (start + i * stride) mod vocab, with a little noise: learnable from context.

    Item i is a pure function of (seed, i), so every rank and every run sees the same data.
    """

    def __init__(self, length: int, seq_len: int, vocab: int, seed: int, noise: float = 0.05) -> None:
        self.length, self.seq_len, self.vocab, self.seed, self.noise = length, seq_len, vocab, seed, noise

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        start = torch.randint(self.vocab, (), generator=g)
        stride = torch.randint(1, 8, (), generator=g)
        seq = (start + stride * torch.arange(self.seq_len + 1)) % self.vocab
        noisy = torch.rand(self.seq_len + 1, generator=g) < self.noise
        seq = torch.where(noisy, torch.randint(self.vocab, (self.seq_len + 1,), generator=g), seq)
        return seq[:-1], seq[1:]


# ---------------------------------------------------------------- the loop


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=8, help="per rank")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--vocab", type=int, default=128)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank on CPU (0: leave)")
    p.add_argument("--backend", default="auto", choices=["auto", "gloo", "nccl"])
    p.add_argument("--job", default=None, help="telemetry job id [default: TORCHELASTIC_RUN_ID]")
    p.add_argument("--agent", default=None, help="agent address [default: TELEMETRY_AGENT, else its socket]")
    p.add_argument("--peak-flops", type=float, default=None,
                   help="peak FLOP/s per rank for MFU [default: TELEMETRY_PEAK_FLOPS, else the GPU table]")
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-factor", type=float, default=3.0)
    p.add_argument("--slow-from", type=int, default=5, help="first slow step (earlier steps set the baseline)")
    p.add_argument("--slow-until", type=int, default=None, help="last slow step [default: to the end]")
    p.add_argument("--hang-step", type=int, default=-1,
                   help="--hang-rank stalls before entering this step; the others block in its all-reduce")
    p.add_argument("--hang-rank", type=int, default=0)
    p.add_argument("--hang-seconds", type=float, default=30.0, help="how long the hung rank stalls")
    p.add_argument("--bad-batch-step", type=int, default=-1)
    p.add_argument("--bad-batch-rank", type=int, default=-1, help="-1: every rank")
    p.add_argument("--nan-step", type=int, default=-1)
    p.add_argument("--nan-rank", type=int, default=0)
    p.add_argument("--no-telemetry", action="store_true")
    p.add_argument("--no-sync-clock", action="store_true",
                   help="do not install SyncWaitClock (no sync_wait / compute_time metrics)")
    p.add_argument("--allgather-metrics", action="store_true")
    p.add_argument("--sync-debug", action="store_true",
                   help="CUDA: torch.cuda.set_sync_debug_mode('error') around each training step")
    p.add_argument("--sync-debug-from", type=int, default=2,
                   help="first step checked by --sync-debug (DDP rebuilds its buckets in step 1's forward, a sync)")
    p.add_argument("--close-timeout", type=float, default=30.0)
    p.add_argument("--linger", type=float, default=0.0,
                   help="seconds to stay up after the last step, so heartbeats report the final collective progress")
    p.add_argument("--timing-json", default=None,
                   help="rank 0 writes its per-step times and the run's wall time here (for the bench)")
    p.add_argument("--warmup", type=int, default=5, help="steps left out of --timing-json's timed region")
    p.add_argument("--print-every", type=int, default=0)
    return p.parse_args(argv)


def gather_metrics(values: torch.Tensor, world: int) -> torch.Tensor:
    """The alternative to the SDK: every rank all_gathers its metric vector on the training thread.

    Mirrors the usual ``DistributedMetrics`` helper: gather [loss, grad_norm, step_time so far,
    dataloader_wait] from every rank, then reduce (mean / max / argmax) on the gathered copy;
    rank 0 reads the result every step to log it.
    """
    out = [torch.empty_like(values) for _ in range(world)]
    dist.all_gather(out, values)
    stacked = torch.stack(out)
    return torch.stack([stacked.mean(0), stacked.amax(0), stacked.argmax(0).to(stacked.dtype)])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))

    use_cuda = torch.cuda.is_available() and args.backend != "gloo"
    backend = args.backend if args.backend != "auto" else ("nccl" if use_cuda else "gloo")
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    elif args.threads > 0:
        torch.set_num_threads(args.threads)

    enable_flight_recorder()  # on by default in torch 2.13; explicit for older releases
    if use_cuda:
        dist.init_process_group(backend=backend, rank=rank, world_size=world, device_id=device)
    else:  # gloo on CPU: no device_id
        dist.init_process_group(backend=backend, rank=rank, world_size=world)

    run = None
    if not args.no_telemetry:
        run = telemetry.init(job=args.job, rank=rank, world_size=world, local_rank=local_rank, agent=args.agent)
        attach(run)  # heartbeats carry collective.last_enqueued / last_completed

    torch.manual_seed(args.seed)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
    raw = TinyLM(args.vocab, args.seq_len, args.d_model, args.heads, args.layers).to(device)
    model = DDP(raw, device_ids=[local_rank] if use_cuda else None)
    opt = torch.optim.AdamW(raw.parameters(), lr=args.lr, fused=True)
    # CPU/gloo: how long this rank blocks in the gradient all-reduce waiting for its peers (see below).
    clock = SyncWaitClock.install(model) if run is not None and not args.no_sync_clock else None

    # FLOPs of one step, counted once on the meta device (free), and the peak for MFU.
    example = torch.zeros(args.batch_size, args.seq_len, dtype=torch.long)
    flops = flops_per_step(
        raw, (example,),
        loss_fn=lambda out: F.cross_entropy(out.flatten(0, 1),
                                            torch.zeros(out.shape[0] * out.shape[1], dtype=torch.long,
                                                        device=out.device)))
    peak = peak_flops(device if use_cuda else None, torch.float32, override=args.peak_flops)

    dataset = ArithmeticTokens(args.steps * args.batch_size * world + args.batch_size * world,
                               args.seq_len, args.vocab, args.seed)
    sampler: DistributedSampler[int] = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=False,
                                                          drop_last=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                        pin_memory=use_cuda, drop_last=True)
    batches = iter(run.wrap_loader(loader)) if run is not None else iter(loader)

    nan = torch.full((), math.nan, device=device)
    noise_gen = torch.Generator(device=device).manual_seed(args.seed + 7919 * (rank + 1))
    slow_here = rank == args.slow_rank and args.slow_factor > 1
    own_times: list[float] = []   # this rank's work per step, without the injected sleep
    step_times: list[float] = []  # whole iteration, as the training loop sees it
    timed_from = None
    cpu_from = (0.0, 0.0)
    slow_sleep: float | None = None
    sync_debug = args.sync_debug and use_cuda

    if rank == 0:
        print(json.dumps({"event": "start", "world_size": world, "backend": backend, "device": str(device),
                          "params": sum(p.numel() for p in raw.parameters()), "flops_per_step": flops,
                          "peak_flops": peak, "telemetry": run is not None,
                          "allgather": args.allgather_metrics}), flush=True)

    for step in range(args.steps):
        if step == args.warmup:
            timed_from = time.perf_counter()
            cpu_from = (time.thread_time(), time.process_time())
        t0 = time.perf_counter()
        checking = sync_debug and step >= args.sync_debug_from
        if step == args.hang_step and rank == args.hang_rank:
            time.sleep(args.hang_seconds)  # a stalled rank: its process lives, its step never starts
        if checking:
            torch.cuda.set_sync_debug_mode("error")
        with run.step(step) if run is not None else contextlib.nullcontext():
            t_data = time.perf_counter()
            x, y = next(batches)  # inside the step: its wait is logged as this step's dataloader_wait
            data_wait = time.perf_counter() - t_data  # (for --allgather-metrics, which has no SDK)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            if step == args.bad_batch_step and args.bad_batch_rank in (-1, rank):
                y = torch.randint(args.vocab, y.shape, device=device, generator=noise_gen)
            logits = model(x)
            if step == args.nan_step and rank == args.nan_rank:
                logits = logits + nan  # a forward that produced NaN on one rank
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()  # DDP all-reduces the gradients: a NaN on one rank reaches all of them
            sync_wait = clock.wait_since_ready(time.perf_counter()) if clock is not None else None
            gn = grad_norm(raw)  # the same on every rank after the all-reduce; a device tensor
            # Skip the update on every rank when the (global) grad norm is not finite, without a
            # host sync: fused AdamW honours `found_inf` (what torch.amp.GradScaler sets), an attribute
            # that torch.optim.Optimizer's type does not declare.
            opt.found_inf = (~torch.isfinite(gn)).to(torch.float32)  # type: ignore[attr-defined]  # read by fused AdamW
            opt.step()
            del opt.found_inf  # type: ignore[attr-defined]  # GradScaler's attribute, read by fused AdamW
            own = time.perf_counter() - t0
            if slow_here and args.slow_from <= step <= (args.slow_until if args.slow_until is not None else step):
                if slow_sleep is None:  # (F - 1) x this rank's median step before slowing down
                    slow_sleep = (args.slow_factor - 1.0) * statistics.median(own_times[1:] or own_times or [own])
                time.sleep(slow_sleep)
            if run is not None:
                extra: dict[str, Any] = {}
                elapsed = time.perf_counter() - t0
                if peak is not None:
                    extra["mfu"] = flops / elapsed / peak
                if sync_wait is not None:
                    # Every rank's wall step time converges to the slowest rank's (the others wait
                    # for it in the all-reduce): the rank's own work is what names the straggler.
                    extra["sync_wait"] = sync_wait
                    extra["compute_time"] = elapsed - sync_wait
                run.log(step, loss=loss.detach(), grad_norm=gn, **extra)
            if args.allgather_metrics:
                host = torch.tensor([time.perf_counter() - t0, data_wait], device=device)
                vec = torch.cat([loss.detach().reshape(1).float(), gn.reshape(1).float(), host.float()])
                reduced = gather_metrics(vec, world)
                if rank == 0:  # the logging rank reads the figures every step (a sync on GPUs)
                    mean, worst, worst_rank = reduced.tolist()
                    if args.print_every and step % args.print_every == 0:
                        print(json.dumps({"step": step, "mean": mean, "max": worst, "argmax": worst_rank}),
                              flush=True)
        if checking:
            torch.cuda.set_sync_debug_mode(0)
        own_times.append(own)
        step_times.append(time.perf_counter() - t0)
        if rank == 0 and args.print_every and step % args.print_every == 0 and not args.allgather_metrics:
            print(json.dumps({"step": step, "loss": loss.item(), "step_time": step_times[-1]}), flush=True)

    if use_cuda:
        torch.cuda.synchronize()
    timed_s = time.perf_counter() - timed_from if timed_from is not None else None
    # CPU seconds over the timed steps: the training thread's own, and the whole process's (the
    # SDK's sender and gRPC threads, gloo's, ...). Unlike wall time, not inflated by other load.
    cpu = ({"thread_s": time.thread_time() - cpu_from[0], "process_s": time.process_time() - cpu_from[1]}
           if timed_from is not None else None)
    if args.linger > 0:
        time.sleep(args.linger)
    durable = run.close(timeout=args.close_timeout) if run is not None else None
    stats = run.stats if run is not None else None
    if rank == 0 and args.timing_json:
        Path(args.timing_json).write_text(json.dumps({
            "world_size": world, "steps": args.steps, "warmup": args.warmup, "timed_s": timed_s,
            "timed_steps": max(0, args.steps - args.warmup), "step_times": step_times, "cpu": cpu,
            "telemetry": run is not None, "allgather": args.allgather_metrics}))
    print(json.dumps({"event": "done", "rank": rank, "durable": durable, "stats": stats,
                      "median_step_s": statistics.median(step_times) if step_times else None,
                      "final_loss": loss.item() if args.steps else None}), flush=True)
    dist.barrier()  # every rank done with gloo before any tears its group down
    dist.destroy_process_group()
    return 0 if durable in (None, True) else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything is done and the process group destroyed; skip the interpreter's teardown, where a C++
    # thread of torch.distributed still joinable at static destruction occasionally aborts the process
    # ("terminate called without an active exception", seen once in ~60 gloo runs here, with and
    # without telemetry) and turns a finished run into a failed one.
    os._exit(code)
