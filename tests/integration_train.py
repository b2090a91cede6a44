"""A tiny model trained under torchrun (CPU, gloo) with Lightning or the HF Trainer, for tests/test_integrations.py.

    torchrun --nproc-per-node 2 tests/integration_train.py lightning --steps 8 --accumulate 2
    torchrun --nproc-per-node 2 tests/integration_train.py lightning transformers --job J   # jobs J-lightning, ...

Not a test module. Each rank trains twice per framework from the same seed - first without telemetry, then
with ``TelemetryCallback`` - and prints one JSON line per framework: both runs' losses and a checksum of the
final weights (the callback must not change training), and whether the telemetry run's data was durable
at the root. Several frameworks run one after the other in the same ranks (torch and the libraries start
once), each as its own job (``--job`` and the framework's name). ``--slow-rank R`` makes rank R sleep ``--slow-seconds`` per micro-batch from optimizer
step ``--slow-from`` on, in the telemetry run only.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from torchrun_tree import run_setups

SEED = 1234


def checksum(model: nn.Module) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


class Slow:
    """Sleeps on one rank from one optimizer step on: a straggler."""

    def __init__(self, args: argparse.Namespace, rank: int, active: bool) -> None:
        self.seconds = args.slow_seconds if active and rank == args.slow_rank else 0.0
        self.start = args.slow_from

    def __call__(self, step: int) -> None:
        if self.seconds and step >= self.start:
            time.sleep(self.seconds)


# ---------------------------------------------------------------- Lightning


def lightning_run(args: argparse.Namespace, rank: int, world: int, telemetry: bool) -> dict[str, Any]:
    import lightning.pytorch as L
    from torch.utils.data import DataLoader, TensorDataset

    from telemetry.integrations.lightning import TelemetryCallback

    slow = Slow(args, rank, telemetry)

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            slow(self.trainer.global_step)
            x, y = batch
            return F.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=0.05)
            decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.9 ** s)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": decay, "interval": "step"}}

    class Losses(L.Callback):
        def __init__(self) -> None:
            self.losses: list[float] = []

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.losses.append(float(outputs["loss"]))

    L.seed_everything(SEED, verbose=False)
    g = torch.Generator().manual_seed(SEED)
    n = args.steps * args.accumulate * args.batch_size * world
    x = torch.randn(n, 16, generator=g)
    data = TensorDataset(x, x[:, :1] * 2 - x[:, 1:2] + 0.1 * torch.randn(n, 1, generator=g))
    losses = Losses()
    callback = TelemetryCallback(job=args.job, peak_flops=args.peak_flops) if telemetry else None
    trainer = L.Trainer(accelerator="cpu", devices=world, strategy="ddp", max_steps=args.steps,
                        accumulate_grad_batches=args.accumulate, gradient_clip_val=0.5, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[losses, *([callback] if callback else [])])
    model = Tiny()
    trainer.fit(model, DataLoader(data, batch_size=args.batch_size, shuffle=False))
    return {"losses": losses.losses, "checksum": checksum(model),
            "durable": callback.durable if callback else None}


# ---------------------------------------------------------------- Hugging Face Trainer


class Tokens(Dataset):
    """Arithmetic token sequences: a pure function of the index, the same on every rank and run."""

    def __init__(self, length: int, seq_len: int = 16, vocab: int = 64) -> None:
        self.length, self.seq_len, self.vocab = length, seq_len, vocab

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = (i * 7 + 3 * torch.arange(self.seq_len)) % self.vocab
        return {"input_ids": ids, "labels": ids.clone()}


def transformers_run(args: argparse.Namespace, rank: int, world: int, telemetry: bool) -> dict[str, Any]:
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    from telemetry.integrations.transformers import TelemetryCallback

    slow = Slow(args, rank, telemetry)

    class Losses(TrainerCallback):
        def __init__(self) -> None:
            self.losses: list[float] = []
            self.step = 0

        def on_step_begin(self, a: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.step = state.global_step

        def on_log(self, a: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
            if logs and "loss" in logs:
                self.losses.append(float(logs["loss"]))

    torch.manual_seed(SEED)
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2)  # random init, no download
    model = GPT2LMHeadModel(config)
    losses = Losses()
    model.register_forward_pre_hook(lambda module, inputs: slow(losses.step))  # inside each micro-batch
    callback = TelemetryCallback(job=args.job, peak_flops=args.peak_flops) if telemetry else None
    with tempfile.TemporaryDirectory() as out:
        training = TrainingArguments(
            output_dir=out, per_device_train_batch_size=args.batch_size, gradient_accumulation_steps=args.accumulate,
            max_steps=args.steps, learning_rate=1e-3, max_grad_norm=0.5, logging_steps=1, save_strategy="no",
            report_to=[], disable_tqdm=True, use_cpu=True, seed=SEED, dataloader_num_workers=0, ddp_backend="gloo")
        trainer = Trainer(model=model, args=training,
                          train_dataset=Tokens(args.steps * args.accumulate * args.batch_size * world),
                          callbacks=[losses, *([callback] if callback else [])])
        trainer.train()
    return {"losses": losses.losses, "checksum": checksum(model),
            "durable": callback.durable if callback else None}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("framework", nargs="+", choices=["lightning", "transformers"])
    p.add_argument("--job", required=True, help="the job; with several frameworks, each's is JOB-FRAMEWORK")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--accumulate", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--peak-flops", type=float, default=None)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-from", type=int, default=0)
    p.add_argument("--slow-seconds", type=float, default=0.0)
    p.add_argument("--telemetry-only", action="store_true", help="skip the run without telemetry")
    args = p.parse_args()
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    def run(framework: str) -> None:
        job = args.job if len(args.framework) == 1 else f"{args.job}-{framework}"
        one = argparse.Namespace(**{**vars(args), "job": job})
        train = lightning_run if framework == "lightning" else transformers_run
        plain = None if args.telemetry_only else train(one, rank, world, telemetry=False)
        with_telemetry = train(one, rank, world, telemetry=True)
        print(json.dumps({"rank": rank, "framework": framework, "plain": plain, "telemetry": with_telemetry}),
              flush=True)

    run_setups(args.framework, run, rank)


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # no interpreter teardown: a joinable torch.distributed C++ thread can abort a finished rank
