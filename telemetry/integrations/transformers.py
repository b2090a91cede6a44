"""Hugging Face Trainer: ``Trainer(..., callbacks=[TelemetryCallback(job="my-run")])``.

Every process (not the main one alone) logs, once per optimizer step, under ``step =
state.global_step`` as it was while the step ran (0 for the first optimizer step):
``step_time`` (``on_step_begin`` to ``on_step_end``), ``loss`` (the sum of the micro-batches'
``training_step`` losses, which the Trainer scales for accumulation: the step's loss as it logs
it), ``grad_norm`` (the accumulated gradients' norm before the Trainer clips them, a device
tensor), ``lr`` (the first param group's, before the step), ``dataloader_wait`` (the time the
Trainer spends in ``get_batch_samples`` fetching the step's micro-batches), ``mfu`` when the peak
FLOP/s is known (``TELEMETRY_PEAK_FLOPS``, ``peak_flops=`` or a tabulated GPU) - the FLOPs of a
step are ``flops_per_step=`` or counted in place during the first optimizer step (``FlopCount``;
that step logs no ``mfu``) - and, on CPU under DDP, ``sync_wait``/``compute_time``.

Why the callback reaches into its trainer: ``TrainerCallback`` events receive the model and the
optimizer but not the loss of a step, and ``on_pre_optimizer_step`` comes *after* clipping. So at
``on_train_begin`` the callback finds the ``Trainer`` that called it (the caller's frame: the
Trainer passes no reference to itself) and wraps that instance's public ``training_step`` and
``get_batch_samples`` for the duration of ``train()``; both are restored at ``on_train_end``.
A trainer that cannot be found (a future Trainer calling back differently) leaves ``step_time``
and ``lr`` only, with one warning. Pass ``trainer=`` to skip the search (TRL's convention for
callbacks that need their trainer: ``trainer.add_callback(TelemetryCallback(trainer=trainer))``).
"""

from __future__ import annotations

import logging
import sys
import time
from types import FrameType
from typing import Any, cast

from torch import nn
from torch.nn.parallel import DistributedDataParallel
from transformers import Trainer, TrainerCallback

from telemetry.integrations.steps import FlopCount, StepRecorder, close_run, open_run, peak_for, total_grad_norm
from telemetry.sdk import Run
from telemetry.torch.integration import SyncWaitClock

__all__ = ["TelemetryCallback"]

log = logging.getLogger("telemetry.integrations.transformers")

_FRAMES_SEARCHED = 8


class TelemetryCallback(TrainerCallback):
    """Logs every process's per-optimizer-step figures to the telemetry tree (see the module notes)."""

    def __init__(self, job: str | None = None, *, agent: str | None = None, trainer: Trainer | None = None,
                 flops_per_step: float | None = None, peak_flops: float | None = None,
                 close_timeout: float = 30.0) -> None:
        self.job, self.agent, self.trainer = job, agent, trainer
        self.flops_per_step, self.peak_flops = flops_per_step, peak_flops
        self.close_timeout = close_timeout
        self.run: Run | None = None
        #: after training: True when everything this rank logged was durable at the root (``Run.close``)
        self.durable: bool | None = None
        self._recorder: StepRecorder | None = None
        self._clock: SyncWaitClock | None = None
        self._wrapped: Trainer | None = None
        self._counted: int | None = None  # FLOPs counted so far in the first optimizer step

    # ------------------------------------------------------------------ lifecycle
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.run is not None:
            return
        self.run = open_run(self.job, args.process_index, args.world_size, max(args.local_process_index, 0),
                            self.agent, args.device)
        dtype = "bf16" if args.bf16 else "16" if args.fp16 else "32"
        self._recorder = StepRecorder(self.run, self.flops_per_step, peak_for(args.device, dtype, self.peak_flops))
        trainer = self.trainer or self._find_trainer()
        if trainer is None:
            log.warning("telemetry: TelemetryCallback could not find its Trainer; logging step_time and lr "
                        "only (pass trainer=...)")
            return
        self._wrap(trainer)
        model = trainer.model_wrapped
        if isinstance(model, DistributedDataParallel):
            self._clock = SyncWaitClock.install(model)  # None on CUDA: NCCL does not block the host there

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._unwrap()
        if self.run is None:
            return
        try:
            self.durable = close_run(self.run, self.close_timeout)
        finally:
            self.run, self._recorder, self._clock = None, None, None

    def _find_trainer(self) -> Trainer | None:
        """The Trainer whose callback handler called this one: `self` in a calling frame."""
        frame: FrameType | None = sys._getframe(1)
        for _ in range(_FRAMES_SEARCHED):
            if frame is None:
                break
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, Trainer) and self in candidate.callback_handler.callbacks:
                return candidate
            frame = frame.f_back
        return None

    # ------------------------------------------------------------------ the trainer's methods, wrapped
    def _wrap(self, trainer: Trainer) -> None:
        fetch, train_step = trainer.get_batch_samples, trainer.training_step
        recorder = self._recorder
        assert recorder is not None
        sharded = bool(getattr(trainer, "is_fsdp_enabled", False))
        grads_on_params = not getattr(trainer, "is_deepspeed_enabled", False)  # DeepSpeed keeps its own

        def get_batch_samples(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            samples = fetch(*args, **kwargs)
            recorder.add_wait(time.perf_counter() - start)
            return samples

        def training_step(model: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            counter = FlopCount() if recorder.peak and recorder.flops_per_step is None else None
            try:
                loss = train_step(model, inputs, *args, **kwargs)
            finally:
                if counter is not None:
                    self._counted = (self._counted or 0) + counter.stop()
            now = time.perf_counter()
            recorder.add_loss(loss)
            if trainer.accelerator.sync_gradients:  # the step's last micro-batch: gradients complete, unclipped
                if self._clock is not None:
                    recorder.add_sync_wait(self._clock.wait_since_ready(now)
                                           if self._clock.last_ready >= start else 0.0)
                if grads_on_params:
                    # The Trainer's model is set from its __init__ on (its type says None for before).
                    recorder.set_grad_norm(total_grad_norm(cast(nn.Module, trainer.model), sharded))
            elif self._clock is not None:
                recorder.add_sync_wait(0.0)
            return loss

        trainer.get_batch_samples = get_batch_samples  # type: ignore[method-assign]  # wrapped; _unwrap restores
        trainer.training_step = training_step  # type: ignore[method-assign]  # wrapped; _unwrap restores
        self._wrapped = trainer

    def _unwrap(self) -> None:
        trainer, self._wrapped = self._wrapped, None
        if trainer is not None:
            for name in ("get_batch_samples", "training_step"):
                trainer.__dict__.pop(name, None)

    # ------------------------------------------------------------------ per optimizer step
    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._recorder is not None:
            self._recorder.begin(state.global_step)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, optimizer: Any = None,
                              **kwargs: Any) -> None:
        if self._recorder is not None and optimizer is not None:
            groups = getattr(optimizer, "param_groups", None) or [{}]
            self._recorder.set_lr(groups[0].get("lr"))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        recorder = self._recorder
        if recorder is None:
            return
        recorder.end()
        if self._counted is not None and recorder.flops_per_step is None:  # the first step ran under the counter
            recorder.flops_per_step = self._counted
