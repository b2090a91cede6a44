"""PyTorch Lightning: ``Trainer(callbacks=[TelemetryCallback(job="my-run")])`` is the whole change.

Every rank (not rank 0 alone) logs, once per optimizer step, under ``step = trainer.global_step``
as it was while the step ran (0 for the first optimizer step, like the plain SDK's loops):

* ``step_time`` - from the first micro-batch's ``on_train_batch_start`` to the end of the batch
  whose optimizer step completed (gradient accumulation: one step, all its micro-batches);
* ``loss`` - the sum of the micro-batches' ``outputs["loss"]`` (Lightning divides each by the
  accumulation count, so this is the step's mean loss), summed on the device;
* ``grad_norm`` - in ``on_before_optimizer_step``, which Lightning calls once the gradients are
  accumulated and *before* it clips them (``telemetry.torch.grad.grad_norm``: a device tensor,
  no ``.item()``); under FSDP the shards' squares are summed with scalar all-reduces over the
  dimensions they are sharded on (``steps.total_grad_norm``), so every rank logs the whole norm;
* ``lr`` - the first param group's learning rate of the optimizer being stepped;
* ``dataloader_wait`` - the time Lightning spends fetching the step's training batches, timed where
  its own profiler times them (the ``train_dataloader_next`` action: the trainer's profiler, of
  whatever class, also reports those spans here while ``fit`` runs); Lightning fetches one batch
  ahead, so a step's wait is the fetch done just before each of its micro-batches;
* ``mfu`` - when the peak FLOP/s is known (a tabulated GPU, ``TELEMETRY_PEAK_FLOPS`` or
  ``peak_flops=``) and the FLOPs of one optimizer step are given (``flops_per_step=``) or counted:
  without them, the first optimizer step runs under ``FlopCounterMode`` and its count is used from
  the next step on (shape-based, so numerics do not change; the counted step logs no ``mfu``);
* ``sync_wait`` and ``compute_time`` on CPU under DDP (``SyncWaitClock``): the rank's own work,
  which names a straggler where every rank's wall step time is the slowest one's. Lightning
  broadcasts a SIGTERM flag from rank 0 before every batch, where fast ranks wait for a slow one
  too, so ``compute_time`` counts only the time inside the micro-batches (batch start to batch
  end) less the gradient all-reduce wait.

Rank, world size and local rank come from the trainer; the job from ``job=``, else the launcher
(torchrun's rendezvous id, Slurm's job id). Without an agent training goes on: the SDK keeps a
bounded backlog, and the end of ``fit`` waits for nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from torch.nn.parallel import DistributedDataParallel

from telemetry.integrations.steps import FlopCount, StepRecorder, close_run, open_run, peak_for, total_grad_norm
from telemetry.sdk import Run
from telemetry.torch.integration import SyncWaitClock


def _callback_bases() -> tuple[type, ...]:
    """Lightning ships under two names whose ``Callback`` classes differ; a trainer of either accepts this
    callback when it derives from every one installed."""
    bases: list[type] = []
    try:
        from lightning.pytorch.callbacks import Callback as UnifiedCallback
        bases.append(UnifiedCallback)
    except ImportError:
        pass
    try:
        from pytorch_lightning.callbacks import Callback as ClassicCallback
        bases.append(ClassicCallback)
    except ImportError:
        pass
    if not bases:
        raise ImportError("telemetry.integrations.lightning needs Lightning: pip install 'treemetry[lightning]'")
    return tuple(bases)


__all__ = ["TelemetryCallback"]

_SHARDED_STRATEGIES = ("FSDPStrategy", "ModelParallelStrategy")
_OWN_GRADIENTS_STRATEGIES = ("DeepSpeedStrategy",)  # gradients not on the parameters: no grad_norm
_FETCH_ACTION = "train_dataloader_next"  # Lightning's profiler action around each training-batch fetch


def _fetch_timing(profiler_class: type, on_wait: Callable[[float], None]) -> type:
    """A subclass of the trainer's profiler class that also hands every training-batch fetch's duration to
    `on_wait` (swapped in as the profiler's class during ``fit``, so ``isinstance`` checks still hold)."""

    fetch_started: dict[str, float] = {}

    class FetchTiming(profiler_class):  # type: ignore[misc]  # a base chosen at run time: mypy cannot see it
        def start(self, action_name: str) -> None:
            if action_name.endswith(_FETCH_ACTION):
                fetch_started[action_name] = time.perf_counter()
            super().start(action_name)

        def stop(self, action_name: str) -> None:
            super().stop(action_name)
            started = fetch_started.pop(action_name, None)
            if started is not None:
                on_wait(time.perf_counter() - started)

    FetchTiming.__name__ = FetchTiming.__qualname__ = profiler_class.__name__
    return FetchTiming


class TelemetryCallback(*_callback_bases()):  # type: ignore[misc]  # bases found at import: mypy cannot see them
    """Logs every rank's per-optimizer-step figures to the telemetry tree (see the module notes)."""

    def __init__(self, job: str | None = None, *, agent: str | None = None, flops_per_step: float | None = None,
                 peak_flops: float | None = None, close_timeout: float = 30.0) -> None:
        super().__init__()
        self.job, self.agent = job, agent
        self.flops_per_step, self.peak_flops = flops_per_step, peak_flops
        self.close_timeout = close_timeout
        self.run: Run | None = None
        #: after training: True when everything this rank logged was durable at the root (``Run.close``)
        self.durable: bool | None = None
        self._recorder: StepRecorder | None = None
        self._sharded = False
        self._grads_on_params = True
        self._clock: SyncWaitClock | None = None
        self._flops: FlopCount | None = None
        self._batch_start = 0.0
        self._profiler_class: type | None = None

    # ------------------------------------------------------------------ lifecycle
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit" or self.run is not None:
            return
        device = trainer.strategy.root_device
        self.run = open_run(self.job, trainer.global_rank, trainer.world_size, trainer.local_rank, self.agent,
                            device)
        peak = peak_for(device, str(trainer.precision), self.peak_flops)
        self._recorder = StepRecorder(self.run, self.flops_per_step, peak)
        strategies = {c.__name__ for c in type(trainer.strategy).__mro__}
        self._sharded = bool(strategies.intersection(_SHARDED_STRATEGIES))
        self._grads_on_params = not strategies.intersection(_OWN_GRADIENTS_STRATEGIES)
        self._profiler_class = type(trainer.profiler)
        trainer.profiler.__class__ = _fetch_timing(self._profiler_class, self._recorder.add_wait)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        model = trainer.strategy.model  # wrapped by now: DDP's comm hook must go on before the first backward
        if isinstance(model, DistributedDataParallel):
            self._clock = SyncWaitClock.install(model)  # None on CUDA: NCCL does not block the host there

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit" or self.run is None:
            return
        self._stop_counting()
        if self._profiler_class is not None:
            trainer.profiler.__class__, self._profiler_class = self._profiler_class, None
        try:
            self.durable = close_run(self.run, self.close_timeout)
        finally:
            self.run, self._recorder, self._clock = None, None, None

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._stop_counting()

    # ------------------------------------------------------------------ per batch
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        recorder = self._recorder
        if recorder is None:
            return
        self._batch_start = time.perf_counter()
        if not recorder.open:
            recorder.begin(trainer.global_step)
            if recorder.flops_per_step is None and recorder.peak and self._flops is None:
                self._flops = FlopCount()

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        if self._recorder is None or self._clock is None:
            return
        now = time.perf_counter()
        # The hook stamps only micro-batches that all-reduce (not those under no_sync).
        synced = self._clock.last_ready >= self._batch_start
        self._recorder.add_sync_wait(self._clock.wait_since_ready(now) if synced else 0.0)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if self._recorder is None:
            return
        groups = getattr(optimizer, "param_groups", None) or [{}]
        if self._grads_on_params:
            self._recorder.set_grad_norm(total_grad_norm(pl_module, self._sharded))
        self._recorder.set_lr(groups[0].get("lr"))

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        recorder = self._recorder
        if recorder is None:
            return
        recorder.add_busy(time.perf_counter() - self._batch_start)
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None:
            recorder.add_loss(loss)
        if recorder.open and trainer.global_step != recorder.step:  # the optimizer stepped in this batch
            counted = self._stop_counting()
            recorder.end()
            if counted is not None:
                recorder.flops_per_step = counted  # 0 (nothing countable): no mfu, and no second count

    def _stop_counting(self) -> int | None:
        if self._flops is None:
            return None
        flops, self._flops = self._flops, None
        return flops.stop()
