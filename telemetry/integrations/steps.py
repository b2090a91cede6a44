"""Per-optimizer-step bookkeeping shared by the framework callbacks.

Lightning and the Hugging Face Trainer call back at different points (per micro-batch, before the
optimizer step, after it), but what one rank logs for one optimizer step is the same, and is
computed here: the callbacks only say when a step begins and ends and hand over what they saw.
Nothing here reads a tensor on the host: the loss is summed on its device and handed to
``run.log``, which reads tensors on the SDK's own thread (telemetry.torch.device_values).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

if TYPE_CHECKING:
    from torch.distributed.tensor import DTensor

import telemetry
from telemetry.sdk import Run
from telemetry.torch.grad import grad_norm
from telemetry.torch.peak import mfu, peak_flops

__all__ = ["FlopCount", "StepRecorder", "close_run", "job_from_launcher", "open_run", "peak_for", "total_grad_norm"]


def job_from_launcher(job: str | None) -> str | None:
    """`job`, else the launcher's id for this run: torchrun's rendezvous id, else Slurm's job id (None: the
    SDK's default). Every rank of a job must agree on it, so nothing rank-local (pids, times) is used."""
    if job:
        return job
    run_id = os.environ.get("TORCHELASTIC_RUN_ID")
    if run_id and run_id != "none":
        return run_id
    return os.environ.get("SLURM_JOB_ID") or None


def open_run(job: str | None, rank: int, world_size: int, local_rank: int, agent: str | None,
             device: torch.device | None = None) -> Run:
    """The rank's SDK run, with the default process group's collective progress on its heartbeats."""
    from telemetry.torch.integration import attach

    run = telemetry.init(job=job_from_launcher(job), rank=rank, world_size=world_size, local_rank=local_rank,
                         agent=agent, device=str(device) if device is not None else "")
    attach(run)  # nothing (quietly) without an initialised process group
    return run


def close_run(run: Run, timeout: float) -> bool:
    """Flush and wait up to `timeout` s for durability; a run that never reached its agent is not waited for
    (training must not stall at its end because no agent runs on this host)."""
    return run.close(timeout if run.connected else 0.2)


_PRECISION_DTYPES = {"bf16": torch.bfloat16, "16": torch.float16, "fp16": torch.float16,
                     "32": torch.float32, "64": torch.float64, "transformer-engine": torch.bfloat16}


def peak_for(device: torch.device, precision: str | torch.dtype, override: float | None) -> float | None:
    """Dense peak FLOP/s of `device` for the matmul dtype a framework's precision setting implies
    (``"bf16-mixed"``, ``"16-mixed"``, ``"32-true"``, or a dtype); None when unknown (CPUs)."""
    if isinstance(precision, torch.dtype):
        dtype = precision
    else:
        dtype = _PRECISION_DTYPES.get(str(precision).split("-")[0], torch.float32)
    if dtype == torch.float64:
        return override  # nothing tabulated for fp64
    return peak_flops(device if device.type == "cuda" else None, dtype, override=override)


def total_grad_norm(module: nn.Module, sharded: bool) -> torch.Tensor:
    """The 2-norm of all of `module`'s gradients, before clipping, as a device tensor (no host sync).

    With replicated gradients (DDP) every rank holds the whole gradient, so the local norm is the
    norm. With sharded ones each rank holds a part: the squared local norms are summed with scalar
    all-reduces, which are enqueued, not waited for, on NCCL (on gloo they block like every gloo
    collective). DTensor gradients (FSDP2, HSDP, tensor parallel) are summed over exactly the mesh
    dimensions they are sharded (or partial) on, so a replica of a shard (HSDP's replicate dimension,
    a parameter tensor parallelism leaves replicated) counts once; FSDP1's flat shards are summed over
    the default group.
    """
    if not sharded:
        return grad_norm(module)
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return grad_norm(module)
    plain: list[torch.Tensor] = []
    meshed: dict[tuple[int, tuple[int, ...]], tuple[Any, tuple[int, ...], list[torch.Tensor]]] = {}
    for p in module.parameters():
        g = p.grad
        if g is None:
            continue
        placements = getattr(g, "placements", None)
        if placements is None:
            plain.append(g)
            continue
        dt = cast("DTensor", g)  # a DTensor's gradient: it has placements
        mesh = dt.device_mesh
        dims = tuple(i for i, pl in enumerate(placements) if pl.is_shard() or pl.is_partial())
        meshed.setdefault((id(mesh), dims), (mesh, dims, []))[2].append(dt.to_local())
    square: torch.Tensor | None = None
    if plain:
        square = _norm_of(plain) ** 2
        if not meshed:  # FSDP1: disjoint flat shards over the default group (with DTensors: replicated leftovers)
            dist.all_reduce(square, op=dist.ReduceOp.SUM)
    elif not meshed:  # FSDP1, and this rank's shards hold no gradient: the others still all-reduce
        square = torch.zeros((), device=_device_of(module))
        dist.all_reduce(square, op=dist.ReduceOp.SUM)
    for mesh, dims, grads in meshed.values():  # the same order on every rank: the parameters'
        part = _norm_of(grads) ** 2
        for dim in dims:
            dist.all_reduce(part, op=dist.ReduceOp.SUM, group=mesh.get_group(dim))
        square = part if square is None else square + part.to(square.device)
    assert square is not None
    return square.sqrt()


def _norm_of(grads: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of these gradient tensors together (``grad_norm`` reads ``.grad`` off what it is given)."""
    return grad_norm([SimpleNamespace(grad=g) for g in grads])  # type: ignore[misc]  # it reads only .grad


def _device_of(module: nn.Module) -> torch.device:
    for p in module.parameters():
        return p.device
    return torch.device("cpu")


class FlopCount:
    """FLOPs of the work run on this thread between construction and :meth:`stop` (``FlopCounterMode``).

    Both callbacks count the first optimizer step in place, on the real device, because neither
    framework offers a general way to re-run a step elsewhere: a LightningModule's work is its own
    ``training_step``, and Hugging Face models read tensor values in ``forward`` (GPT-2 does), so
    ``telemetry.torch.flops.flops_per_step``'s meta-device copy cannot trace them. The count looks
    at shapes only, so the step's numerics do not change; on CPU, SDPA attention counts 0 (see
    ``telemetry.torch.flops``).
    """

    def __init__(self) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        self._mode = FlopCounterMode(display=False)
        self._mode.__enter__()

    def stop(self) -> int:
        self._mode.__exit__(None, None, None)
        return int(self._mode.get_total_flops())


class StepRecorder:
    """One rank's figures for the optimizer step in progress; :meth:`end` logs them and closes the step.

    ``begin(step)`` is idempotent while a step is open (each micro-batch of an accumulating step
    calls it). Data-loader waits added before ``begin`` belong to the step that begins next.
    ``flops_per_step`` (per rank, per optimizer step) and ``peak`` together give ``mfu``; either may
    be set later (a count taken during the first step).
    """

    def __init__(self, run: Run, flops_per_step: float | None = None, peak: float | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.run = run
        self.flops_per_step = flops_per_step
        self.peak = peak
        self._clock = clock
        self.step: int | None = None
        self._start = 0.0
        self._wait = 0.0
        self._reset()

    def _reset(self) -> None:
        self.step = None
        self._wait = 0.0
        self._loss: torch.Tensor | float | None = None
        self._grad_norm: torch.Tensor | float | None = None
        self._lr: torch.Tensor | float | None = None
        self._sync_wait: float | None = None
        self._busy: float | None = None

    @property
    def open(self) -> bool:
        return self.step is not None

    def begin(self, step: int) -> None:
        if self.step is None:
            self.step = int(step)
            self._start = self._clock()

    def add_wait(self, seconds: float) -> None:
        self._wait += max(0.0, seconds)

    def add_loss(self, loss: Any) -> None:
        """A micro-batch's share of the step's loss (already divided by the accumulation count, as both
        frameworks hand it over); summed on its device."""
        if isinstance(loss, torch.Tensor):
            loss = loss.detach()
            if loss.numel() != 1:
                return
            loss = loss.reshape(())
        elif not isinstance(loss, (int, float)):
            return
        self._loss = loss if self._loss is None else self._loss + loss

    def add_busy(self, seconds: float) -> None:
        """Time of a micro-batch's own work, where the framework runs collectives between micro-batches that
        a slower rank would make this one wait in (Lightning's per-batch SIGTERM broadcast under DDP): then
        ``compute_time`` is the busy time less ``sync_wait``, not the whole step's."""
        self._busy = (self._busy or 0.0) + max(0.0, seconds)

    def add_sync_wait(self, seconds: float) -> None:
        self._sync_wait = (self._sync_wait or 0.0) + max(0.0, seconds)

    def set_grad_norm(self, grad_norm: torch.Tensor | float) -> None:
        """The accumulated gradients' norm before clipping (a device tensor is read later, without a sync)."""
        self._grad_norm = grad_norm

    def set_lr(self, lr: torch.Tensor | float | None) -> None:
        self._lr = lr

    def end(self) -> dict[str, Any] | None:
        """Log the step's figures and close it; returns what was logged (None when no step was open)."""
        if self.step is None:
            return None
        step_time = self._clock() - self._start
        values: dict[str, Any] = {"step_time": step_time, "dataloader_wait": self._wait}
        if self._loss is not None:
            values["loss"] = self._loss
        if self._grad_norm is not None:
            values["grad_norm"] = self._grad_norm
        if self._lr is not None:
            values["lr"] = self._lr
        if self._sync_wait is not None:
            values["sync_wait"] = self._sync_wait
            own = self._busy if self._busy is not None else step_time
            values["compute_time"] = max(0.0, own - self._sync_wait)
        if self.flops_per_step and self.peak and step_time > 0:
            values["mfu"] = mfu(self.flops_per_step, step_time, self.peak)
        step = self.step
        self._reset()
        self.run.log(step, **values)
        self.run.end_step(step)
        return values
