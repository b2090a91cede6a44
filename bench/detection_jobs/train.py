"""A training job for bench/detection.py: DDP on CPU (gloo), telemetry through the README's lines only.

    torchrun --nproc-per-node 3 bench/detection_jobs/train.py --model lm --steps 300 --seed 1 \
        --fault slow_rank --fault-rank 2 --fault-step 150 --truth truth.jsonl

Two models, both small enough for a 2-core machine with one intra-op thread per rank:

- `mlp`: regression of a fixed random teacher network (plus noise) on fresh random inputs every step;
  its loss falls to the noise floor and stays there, noisy.
- `lm`: a character-level causal transformer on the English text CPython ships
  (`pydoc_data.topics.topics`), random windows per rank and step; its loss falls for the whole run.

Telemetry is what the README shows a user: `telemetry.init()`, `for step, batch in
enumerate(run.wrap_loader(loader))`, `with run.step(step)`, `run.log(step, loss=..., grad_norm=...,
mfu=...)` with `telemetry.torch.grad_norm` and `telemetry.torch.flops_per_step` / `peak.mfu`,
`run.close()`. Nothing else: the detectors must work from that.

Faults (`--fault`, on `--fault-rank` from `--fault-step`); the rank injecting it appends one JSON line
to `--truth` with the wall time it started, so the harness measures detection delay from it:

- `slow_rank`: the rank sleeps inside every step from S on, (`--slow-factor` - 1) x its median step;
- `loader_stuck`: the rank's loader blocks `--stall-s` seconds fetching batch S (alive, not stepping);
- `nan`: the rank's forward output is NaN at step S (the update is skipped on every rank);
- `bad_batch`: the rank's batch at step S has corrupted targets (a loss spike on that rank);
- `slow_loader`: the rank's loader takes (`--slow-factor` - 1) x its median step longer per batch from S on.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # runnable from a checkout

from bench.detection_jobs.job import add_job_arguments, finish, start, write_truth
from telemetry.torch import flops_per_step, grad_norm
from telemetry.torch.peak import mfu

FAULTS = ("none", "slow_rank", "loader_stuck", "nan", "bad_batch", "slow_loader")
PEAK_FLOPS = 1e11  # a made-up CPU peak: MFU's level is meaningless here, its changes are what is judged


# ---------------------------------------------------------------- models


class MLP(nn.Module):
    def __init__(self, d_in: int = 32, hidden: int = 128) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2)
                   for t in self.qkv(self.ln1(x)).split(d, dim=-1))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.ln2(x))


class CharLM(nn.Module):
    def __init__(self, vocab: int, seq_len: int, d: int = 64, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq_len, d) * 0.02)
        self.blocks = nn.Sequential(*(Block(d, heads) for _ in range(layers)))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos[: idx.shape[1]])))


# ---------------------------------------------------------------- data: one item = one rank's batch


class Faulty(Dataset):
    """Batch i of this rank, a pure function of (seed, rank, i); the loader faults live here, in
    `__getitem__`, where a real input pipeline stalls."""

    def __init__(self, steps: int, seed: int, rank: int, stuck_at: int = -1, stall_s: float = 0.0,
                 slow_from: int = -1) -> None:
        self.steps, self.seed, self.rank = steps, seed, rank
        self.stuck_at, self.stall_s, self.slow_from = stuck_at, stall_s, slow_from
        self.slow_s = 0.0  # set by the loop once it knows its median step
        self.on_fault = lambda: None

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if i == self.stuck_at or i == self.slow_from:
            self.on_fault()
        if i == self.stuck_at:
            time.sleep(self.stall_s)
        if 0 <= self.slow_from <= i:
            time.sleep(self.slow_s)
        return self.make(torch.Generator().manual_seed(self.seed * 1_000_003 + self.rank * 10_007 + i))

    def make(self, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:  # pragma: no cover - abstract
        raise NotImplementedError


class TeacherData(Faulty):
    """x ~ N(0, 1)^32, y = teacher(x) + noise: the teacher is fixed by the seed, the same on every rank."""

    def __init__(self, *args: Any, batch: int = 64, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batch = batch
        g = torch.Generator().manual_seed(self.seed)
        self.w1, self.w2 = torch.randn(32, 16, generator=g) / 32 ** 0.5, torch.randn(16, generator=g) / 4

    def make(self, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(self.batch, 32, generator=g)
        return x, torch.tanh(x @ self.w1) @ self.w2 + 0.1 * torch.randn(self.batch, generator=g)


class TextData(Faulty):
    """Random windows of the documentation text CPython ships (no download)."""

    def __init__(self, *args: Any, text: torch.Tensor, seq_len: int = 64, batch: int = 16, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.text, self.seq_len, self.batch = text, seq_len, batch

    def make(self, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(len(self.text) - self.seq_len - 1, (self.batch,), generator=g)
        rows = torch.stack([self.text[s: s + self.seq_len + 1] for s in starts.tolist()])
        return rows[:, :-1], rows[:, 1:]


def corpus() -> tuple[torch.Tensor, int]:
    """The text of every pydoc topic, in a fixed order, as character ids; and the vocabulary size."""
    from pydoc_data.topics import topics
    text = "".join(topics[k] for k in sorted(topics))
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    return torch.tensor([index[c] for c in text], dtype=torch.long), len(chars)


# ---------------------------------------------------------------- the loop


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("mlp", "lm"), default="mlp")
    add_job_arguments(p, steps=300, fault_rank=1, fault_step=150)
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--slow-factor", type=float, default=2.0, help="slow_rank / slow_loader: x the median step")
    p.add_argument("--stall-s", type=float, default=75.0, help="loader_stuck: seconds the loader blocks")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rank, world, run = start(args)

    here = args.fault_rank == rank
    fault = args.fault if here else "none"
    stuck_at = args.fault_step if fault == "loader_stuck" else -1
    slow_from = args.fault_step if fault == "slow_loader" else -1
    faults = dict(stuck_at=stuck_at, stall_s=args.stall_s, slow_from=slow_from)
    if args.model == "mlp":
        data: Faulty = TeacherData(args.steps, args.seed, rank, **faults)
        raw: nn.Module = MLP()

        def corrupt(y: torch.Tensor) -> torch.Tensor:
            return y * 20.0 + 5.0  # targets far off their scale
    else:
        text, vocab = corpus()
        text_data = TextData(args.steps, args.seed, rank, text=text, **faults)
        data, raw = text_data, CharLM(vocab, text_data.seq_len)

        def corrupt(y: torch.Tensor) -> torch.Tensor:
            return torch.randint(vocab, y.shape)  # random characters
    model = DDP(raw)
    opt = torch.optim.AdamW(raw.parameters(), lr=3e-3)
    x0, y0 = data.make(torch.Generator().manual_seed(0))
    loss_of = ((lambda out, y: F.mse_loss(out, y)) if args.model == "mlp"
               else (lambda out, y: F.cross_entropy(out.flatten(0, 1), y.flatten())))
    flops = flops_per_step(raw, (x0,), loss_fn=lambda out: loss_of(out, y0.to(out.device)))

    own: list[float] = []  # this rank's step times before the fault: the slowdowns are relative to them
    injected: dict = {}

    def record(extra_s: float | None = None) -> None:
        if injected:
            return
        injected.update(fault=args.fault, rank=rank, step=args.fault_step, time=time.time(), model=args.model)
        if extra_s is not None:
            injected["extra_s"] = extra_s
        write_truth(args.truth, injected)

    slow_s = 0.0
    if fault == "loader_stuck":
        data.on_fault = record
    loader = DataLoader(data, batch_size=None, shuffle=False)
    for step, (x, y) in enumerate(run.wrap_loader(loader)):
        if step == args.fault_step - 1 and fault in ("slow_rank", "slow_loader"):
            slow_s = (args.slow_factor - 1.0) * statistics.median(own[5:] or own)
            data.slow_s = slow_s
            if fault == "slow_loader":
                data.on_fault = lambda: record(slow_s)
        with run.step(step):
            t0 = time.perf_counter()
            if fault == "bad_batch" and step == args.fault_step:
                record()
                y = corrupt(y)
            out = model(x)
            if fault == "nan" and step == args.fault_step:
                record()
                out = out + math.nan
            loss = loss_of(out, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gn = grad_norm(raw)
            if torch.isfinite(gn):  # a NaN reaches every rank through the all-reduce: skip everywhere
                opt.step()
            if fault == "slow_rank" and step >= args.fault_step:
                record(slow_s)
                time.sleep(slow_s)
            elapsed = time.perf_counter() - t0
            if step < args.fault_step:
                own.append(elapsed)
            run.log(step, loss=loss.detach(), grad_norm=gn, mfu=mfu(flops, elapsed, PEAK_FLOPS))
    return finish(run, rank, own, args, final_loss=loss.item())


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip torch.distributed's static teardown (see examples/train_ddp.py)
