"""Callbacks for the training frameworks people actually use (optional: each imports its framework).

* :mod:`telemetry.integrations.lightning` - ``TelemetryCallback`` for PyTorch Lightning
  (``lightning.pytorch`` or ``pytorch_lightning``).
* :mod:`telemetry.integrations.transformers` - ``TelemetryCallback`` for the Hugging Face ``Trainer``.

Both log, on every rank and once per optimizer step, what the plain-SDK example logs by hand:
``step_time``, ``loss``, ``grad_norm`` (before clipping, read without a host sync), ``lr``,
``dataloader_wait`` and, when the FLOPs of a step and the device's peak are known, ``mfu``; on CPU
under DDP also ``sync_wait`` and ``compute_time``. The framework-neutral bookkeeping is in
:mod:`telemetry.integrations.steps`. See docs/integrations.md.
"""
