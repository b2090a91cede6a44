"""The Lightning and Hugging Face Trainer callbacks under FSDP: 2 CPU ranks under torchrun on gloo against a real
local tree (the fixture and helpers of tests/test_integrations.py).

What runs on CPU with torch 2.13.0, lightning 2.6.6, transformers 5.23.0 and accelerate 1.15.0 (see
docs/integrations.md, "FSDP"):

* Lightning's ``ModelParallelStrategy`` with FSDP2 (``fully_shard`` in ``configure_model``) runs: tested here.
* Lightning's ``strategy="fsdp"``/``FSDPStrategy`` (FSDP1) refuses a CPU accelerator, and FSDP1 itself needs an
  accelerator unless given ``device_id``: tested here as refusals, so that a release that lifts them is noticed.
* The HF Trainer's ``fsdp`` on CPU: accelerate only turns FSDP on for accelerator devices, so with ``use_cpu``
  the Trainer trains under DDP (FSDP2, the default) or refuses (FSDP1): tested here as such.

This file is also the training script: ``torchrun --nproc-per-node 2 tests/test_integrations_fsdp.py
lightning-fsdp2 --job J`` trains a tiny model twice per rank from one seed, without and with ``TelemetryCallback``,
and prints one JSON line per rank (both runs' losses and final weights, the reference whole-model gradient norm per
optimizer step, whether the parameters were really sharded). Given several set-ups (``probe lightning-fsdp2
transformers-fsdp2 ...``) it runs them one after the other in the same ranks, each as its own job (J-SETUP): the
tests run every set-up in ONE torchrun job (``trained``), so that torch, Lightning and transformers start once per
rank rather than once per set-up (each start was most of a test's time: ~5 s quiet, a minute or more loaded).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

import torch.distributed as dist  # noqa: E402  (after the sys.path line above)

from integration_train import SEED, Tokens  # noqa: E402  (after the sys.path line above)
from test_integrations import (  # noqa: E402,F401  (tree: the fixture)
    ACCUMULATE,
    FRAMEWORK_TIMEOUT_S,
    PEAK,
    STEPS,
    WORLD,
    check_training_and_figures,
    framework_ranks,
    installed,
    run_frameworks,
    tree,
)
from torchrun_tree import run_setups  # noqa: E402  (after the sys.path line above)

SETUPS = ("probe", "lightning-fsdp2", "lightning-hsdp", "lightning-fsdp1", "lightning-fsdp1-flat", "transformers-fsdp2")

pytestmark = [
    pytest.mark.timeout(len(SETUPS) * FRAMEWORK_TIMEOUT_S + 60),  # the first test starts the job of every set-up
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available"),
]

# Per optimizer step on every rank under FSDP. sync_wait/compute_time are DDP's (SyncWaitClock hooks DDP's
# gradient all-reduce): not logged under FSDP.
PER_STEP = ("step_time", "loss", "grad_norm", "lr", "dataloader_wait")
CLIP = 0.5


# ---------------------------------------------------------------- the training script (one rank)


def _local(t: torch.Tensor) -> torch.Tensor:
    to_local = getattr(t, "to_local", None)  # DTensor (FSDP2): this rank's shard
    return to_local() if callable(to_local) else t


def _full(t: torch.Tensor) -> torch.Tensor:
    full = getattr(t, "full_tensor", None)  # DTensor: all-gathered (a collective: every rank calls it in turn)
    return full() if callable(full) else t


def whole_model_grad_norm(params: Any) -> float:
    """The reference: the norm of the whole model's gradients, gathered (a host sync; the plain run only)."""
    return math.sqrt(sum(float(_full(p.grad).double().pow(2).sum()) for p in params if p.grad is not None))


def whole_checksum(params: Any) -> float:
    return float(sum(_full(p.detach()).double().sum() for p in params))


def sharding(params: Any) -> dict[str, int]:
    """How much of the model this rank holds (DTensors: under FSDP2 less than all of it)."""
    params = list(params)
    return {"local": sum(_local(p).numel() for p in params), "whole": sum(p.numel() for p in params)}


class _Tiny:
    """The tiny regression model and its data, as tests/integration_train.py's Lightning run has them."""

    @staticmethod
    def net() -> nn.Module:
        return nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 8), nn.Tanh(), nn.Linear(8, 1))

    @staticmethod
    def data(args: argparse.Namespace, world: int) -> Any:
        from torch.utils.data import DataLoader, TensorDataset

        g = torch.Generator().manual_seed(SEED)
        n = args.steps * args.accumulate * args.batch_size * world
        x = torch.randn(n, 16, generator=g)
        y = x[:, :1] * 2 - x[:, 1:2] + 0.1 * torch.randn(n, 1, generator=g)
        return DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=False)


def lightning_run(args: argparse.Namespace, rank: int, world: int, telemetry: bool) -> dict[str, Any]:
    """FSDP2 through ``ModelParallelStrategy`` (supported on CPU), or FSDP1 through ``FSDPStrategy`` forced onto
    CPU: a subclass (the accelerator connector refuses ``FSDPStrategy`` on CPU by its exact type) that wraps the
    LightningModule as ``FSDPStrategy`` does (root FSDP unit, ``auto_wrap_policy`` for the Linear layers) but with
    ``device_id=cpu``, which FSDP1 needs where there is no accelerator (Lightning passes the device's index,
    None on CPU). ``-flat``: FSDP1 with ``use_orig_params=False`` (flat parameters). ``lightning-hsdp``: FSDP2
    on a (replicate, shard) mesh (hybrid sharding: with 2 ranks, 2 replicas of 1 shard)."""
    import lightning.pytorch as L
    from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard

    from telemetry.integrations.lightning import TelemetryCallback

    fsdp1 = args.framework.startswith("lightning-fsdp1")
    hsdp = args.framework == "lightning-hsdp"

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = _Tiny.net()

        def configure_model(self) -> None:  # FSDP2: every Linear its own unit, then the root
            if fsdp1:
                return
            mesh = self.device_mesh["data_parallel"]
            if hsdp:  # replicated across the ranks, sharded within each replica (of one rank here)
                mesh = init_device_mesh("cpu", (world, 1), mesh_dim_names=("replicate", "shard"))
            for layer in self.net:
                if isinstance(layer, nn.Linear):
                    fully_shard(layer, mesh=mesh)
            fully_shard(self.net, mesh=mesh)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return F.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.trainer.model.parameters(), lr=0.05)  # the wrapped model's: flat ones too
            decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.9 ** s)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": decay, "interval": "step"}}

    class Record(L.Callback):
        def __init__(self) -> None:
            self.losses: list[float] = []
            self.grad_norms: list[float] = []

        def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
            if telemetry:  # the reference syncs and gathers: the plain run only
                return
            if fsdp1:  # FSDP1's own total norm (max_norm inf: the gradients are multiplied by exactly 1)
                self.grad_norms.append(float(trainer.strategy.model.clip_grad_norm_(math.inf)))
            else:
                self.grad_norms.append(whole_model_grad_norm(pl_module.parameters()))

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.losses.append(float(outputs["loss"]))

    class CPUFSDPStrategy(FSDPStrategy):
        def _setup_model(self, model: nn.Module) -> nn.Module:
            return FullyShardedDataParallel(module=model, cpu_offload=self.cpu_offload,
                                            mixed_precision=self.mixed_precision_config,
                                            sharding_strategy=self.sharding_strategy, device_id=torch.device("cpu"),
                                            **self.kwargs)

    L.seed_everything(SEED, verbose=False)
    record = Record()
    callback = TelemetryCallback(job=args.job, peak_flops=args.peak_flops) if telemetry else None
    if fsdp1:
        strategy: Any = CPUFSDPStrategy(process_group_backend="gloo", auto_wrap_policy={nn.Linear},
                                        use_orig_params=not args.framework.endswith("-flat"))
    else:
        strategy = ModelParallelStrategy(data_parallel_size=world, tensor_parallel_size=1,
                                         process_group_backend="gloo")
    trainer = L.Trainer(accelerator="cpu", devices=world, strategy=strategy, max_steps=args.steps,
                        accumulate_grad_batches=args.accumulate,
                        gradient_clip_val=None if fsdp1 else CLIP,  # Lightning's FSDP1 precision cannot clip by norm
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[record, *([callback] if callback else [])])
    model = Tiny()
    trainer.fit(model, _Tiny.data(args, world))
    local = sum(_local(p).numel() for p in trainer.strategy.model.parameters())
    if fsdp1:
        with FullyShardedDataParallel.summon_full_params(trainer.strategy.model):
            checksum = whole_checksum(model.parameters())
    else:
        checksum = whole_checksum(model.parameters())
    return {"losses": record.losses, "grad_norms": record.grad_norms, "checksum": checksum,
            "sharding": {"local": local, "whole": sum(p.numel() for p in _Tiny.net().parameters())},
            "global_step": trainer.global_step, "durable": callback.durable if callback else None}


def transformers_run(args: argparse.Namespace, rank: int, world: int, telemetry: bool) -> dict[str, Any]:
    """The HF Trainer with ``fsdp=True`` (FSDP2, its default) forced on CPU: accelerate turns FSDP on only for
    accelerator devices, so the Trainer's accelerator state is switched to FSDP with the plugin the Trainer
    built from its arguments, before the model is prepared (the rest - accelerate's ``fully_shard`` of each
    ``GPT2Block`` and the root, its gradient accumulation and clipping - is the Trainer's own)."""
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    from telemetry.integrations.transformers import TelemetryCallback

    class CPUFSDPTrainer(Trainer):
        def create_accelerator_and_postprocess(self) -> None:
            super().create_accelerator_and_postprocess()
            state = self.accelerator.state
            if state.distributed_type != DistributedType.FSDP:
                state.distributed_type = DistributedType.FSDP
                state.fsdp_plugin = FullyShardedDataParallelPlugin(**self.args.fsdp_plugin_args)
                self.is_fsdp_enabled = True

    class Logged(TrainerCallback):
        def __init__(self) -> None:
            self.losses: list[float] = []
            self.grad_norms: list[float] = []

        def on_log(self, a: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
            if logs and "loss" in logs:
                self.losses.append(float(logs["loss"]))
                self.grad_norms.append(float(logs["grad_norm"]))  # the Trainer's own pre-clip norm

    torch.manual_seed(SEED)
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2)  # random init, no download
    model = GPT2LMHeadModel(config)
    logged = Logged()
    callback = TelemetryCallback(job=args.job, peak_flops=args.peak_flops) if telemetry else None
    with tempfile.TemporaryDirectory() as out:
        training = TrainingArguments(
            output_dir=out, per_device_train_batch_size=args.batch_size, gradient_accumulation_steps=args.accumulate,
            max_steps=args.steps, learning_rate=1e-3, max_grad_norm=CLIP, logging_steps=1, save_strategy="no",
            report_to=[], disable_tqdm=True, use_cpu=True, seed=SEED, dataloader_num_workers=0, ddp_backend="gloo",
            fsdp=True, fsdp_config={"version": 2, "transformer_layer_cls_to_wrap": ["GPT2Block"]})
        trainer = CPUFSDPTrainer(model=model, args=training,
                                 train_dataset=Tokens(args.steps * args.accumulate * args.batch_size * world),
                                 callbacks=[logged, *([callback] if callback else [])])
        trainer.train()
    return {"losses": logged.losses, "grad_norms": logged.grad_norms, "checksum": whole_checksum(model.parameters()),
            "sharding": sharding(model.parameters()), "global_step": trainer.state.global_step,
            "fsdp": bool(trainer.is_fsdp_enabled), "durable": callback.durable if callback else None}


def _refusal(attempt: Any) -> str | None:
    try:
        attempt()
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    return None


def probe(rank: int, world: int) -> dict[str, Any]:
    """What the libraries do, unforced, with FSDP on CPU (every attempt short of training)."""
    import lightning.pytorch as L
    from accelerate.state import AcceleratorState
    from torch.distributed.fsdp import FullyShardedDataParallel
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    found: dict[str, Any] = {}
    found["lightning_fsdp"] = _refusal(lambda: L.Trainer(accelerator="cpu", devices=world, strategy="fsdp"))
    dist.init_process_group("gloo")
    found["torch_fsdp1"] = _refusal(lambda: FullyShardedDataParallel(nn.Linear(4, 4)))
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2))
    for version in (2, 1):
        with tempfile.TemporaryDirectory() as out:
            training = TrainingArguments(output_dir=out, use_cpu=True, report_to=[], ddp_backend="gloo", fsdp=True,
                                         fsdp_config={"version": version})
            trainers: list[Any] = []
            found[f"hf_fsdp{version}"] = _refusal(lambda: trainers.append(Trainer(model=model, args=training)))
            if trainers:
                found[f"hf_fsdp{version}_state"] = {"is_fsdp_enabled": bool(trainers[0].is_fsdp_enabled),
                                                    "distributed_type": str(trainers[0].accelerator.distributed_type)}
        AcceleratorState._reset_state()
    return found


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("framework", nargs="+", choices=SETUPS, help="set-ups, run one after the other (probe first: "
                   "it starts the process group itself, as a fresh process)")
    p.add_argument("--job", required=True, help="the job; with several set-ups, each's is JOB-SETUP")
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("--accumulate", type=int, default=ACCUMULATE)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--peak-flops", type=float, default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    def run(framework: str) -> None:
        if framework == "probe":
            print(json.dumps({"rank": rank, "framework": framework, "probe": probe(rank, world)}), flush=True)
            return
        job = args.job if len(args.framework) == 1 else f"{args.job}-{framework}"
        one = argparse.Namespace(**{**vars(args), "framework": framework, "job": job})
        train = transformers_run if framework.startswith("transformers") else lightning_run
        plain = train(one, rank, world, telemetry=False)
        with_telemetry = train(one, rank, world, telemetry=True)
        print(json.dumps({"rank": rank, "framework": framework, "plain": plain, "telemetry": with_telemetry}),
              flush=True)

    run_setups(args.framework, run, rank)


# ---------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def trained(tree: dict) -> dict[str, Any]:
    """Every set-up whose libraries are installed, in one torchrun job (the probe first: see main)."""
    needs = {"probe": ("lightning", "transformers"), "transformers-fsdp2": ("transformers",)}
    setups = [s for s in SETUPS if installed(*needs.get(s, ("lightning",)))]
    return run_frameworks(Path(__file__).resolve(), setups, ["--steps", str(STEPS), "--accumulate", str(ACCUMULATE),
                                                             "--peak-flops", str(PEAK)],
                          f"fsdp-{uuid.uuid4().hex[:8]}", tree["agent"])


def _check(api: str, job: str, ranks: list[dict], sharded: bool = True) -> dict[str, dict[int, dict]]:
    """What FSDP must give as DDP does: sharded training unchanged by the callback, every rank's figures for
    every optimizer step, and on every rank the whole model's pre-clip gradient norm (not its shard's)."""
    for r in ranks:
        if sharded:
            assert r["telemetry"]["sharding"]["local"] < r["telemetry"]["sharding"]["whole"], "not sharded"
        assert r["telemetry"]["global_step"] == STEPS
    figures = check_training_and_figures(api, job, ranks, PER_STEP)
    reference = ranks[0]["plain"]["grad_norms"]
    assert len(reference) == STEPS and all(r["plain"]["grad_norms"] == reference for r in ranks)
    for step in range(STEPS):
        norm = figures["grad_norm"][step]
        for logged in (norm["min"], norm["max"]):
            assert math.isclose(logged, reference[step], rel_tol=1e-5), (step, norm, reference[step])
    return figures


@pytest.mark.parametrize("fsdp", ["fsdp2", "hsdp", "fsdp1", "fsdp1-flat"])
def test_lightning_callback_under_fsdp_with_accumulation(tree: dict, trained: dict, fsdp: str) -> None:
    """fsdp2: ModelParallelStrategy with fully_shard (Lightning's FSDP2, runs on CPU as shipped); fsdp1:
    FSDPStrategy forced onto CPU (see lightning_run), with the original parameters (Lightning's default) or flat
    ones; hsdp: FSDP2 with hybrid sharding (2 replicas of 1 shard: each rank's gradient is the whole one, and
    summing the replicas' squares would overstate the norm by sqrt(2))."""
    pytest.importorskip("lightning")
    job, ranks = framework_ranks(trained, f"lightning-{fsdp}")
    figures = _check(tree["api"], job, ranks, sharded=fsdp != "hsdp")
    for step in range(STEPS):
        # the step's loss: each rank's micro-batch losses (Lightning divides them by the accumulation count) summed
        per_rank = [sum(r["plain"]["losses"][step * ACCUMULATE:(step + 1) * ACCUMULATE]) for r in ranks]
        assert math.isclose(figures["loss"][step]["mean"], sum(per_rank) / WORLD, rel_tol=1e-6)
        assert math.isclose(figures["lr"][step]["mean"], 0.05 * 0.9 ** step, rel_tol=1e-6), "lr of that step"
    if not fsdp.startswith("fsdp1"):
        assert max(ranks[0]["plain"]["grad_norms"]) > CLIP  # so logged before Lightning clips


def test_transformers_callback_under_fsdp2_with_accumulation(tree: dict, trained: dict) -> None:
    """The Trainer's FSDP2 forced onto CPU (see transformers_run)."""
    pytest.importorskip("transformers")
    job, ranks = framework_ranks(trained, "transformers-fsdp2")
    assert all(r["telemetry"]["fsdp"] for r in ranks)
    figures = _check(tree["api"], job, ranks)  # the reference norm: the Trainer's own logged (pre-clip) grad_norm
    logged = ranks[0]["plain"]["losses"]  # logging_steps=1: the Trainer's loss (mean over ranks) per step
    assert len(logged) == STEPS
    for step in range(STEPS):
        assert math.isclose(figures["loss"][step]["mean"], logged[step], rel_tol=1e-4), (step, logged)
    assert max(ranks[0]["plain"]["grad_norms"]) > CLIP  # so logged before the Trainer clips


def test_fsdp_on_cpu_as_the_libraries_ship(trained: dict) -> None:
    """Unforced, on CPU: Lightning's "fsdp" is refused, FSDP1 wants an accelerator, and the HF Trainer's fsdp
    is dropped silently (FSDP2: the run is DDP) or refused (FSDP1). If one of these changes, the forced set-ups
    above and docs/integrations.md ("FSDP") need a second look."""
    pytest.importorskip("lightning")
    pytest.importorskip("transformers")
    found = [r["probe"] for r in framework_ranks(trained, "probe")[1]]
    assert found[0] == found[1], found
    probe = found[0]
    assert "The strategy `fsdp` requires a GPU accelerator" in probe["lightning_fsdp"], probe
    assert "FSDP needs a non-CPU accelerator device" in probe["torch_fsdp1"], probe
    assert probe["hf_fsdp2"] is None and probe["hf_fsdp2_state"] == {
        "is_fsdp_enabled": False, "distributed_type": "DistributedType.MULTI_CPU"}, probe
    assert "There are currently no available devices found" in probe["hf_fsdp1"], probe


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip the interpreter's teardown: a torch.distributed C++ thread still joinable at static destruction
    # sometimes aborts a finished rank ("terminate called without an active exception": a CI run's fsdp2 rank 1).
    os._exit(0)
