"""PyTorch integration for the telemetry SDK (optional: importing this package imports torch).

Nothing else under ``telemetry/`` imports torch; the SDK imports this package lazily, only when
a logged value is a tensor or a torch helper is asked for.

* :func:`stage` / :class:`StagedValues` - read logged tensors without a host-device sync on the
  training thread (pinned buffer + non_blocking copy + CUDA event, polled by the SDK's thread).
* :func:`flops_per_step` - FLOPs of one forward+backward, counted once on the meta device.
* :func:`peak_flops` / :func:`mfu` - dense peak FLOP/s table and model FLOPs utilisation.
* :func:`grad_norm` - total gradient norm as a device tensor (no ``.item()``).
* :class:`CollectiveProgress` - the default process group's last enqueued / completed
  collective sequence numbers, from the flight recorder, for the heartbeat.
* :class:`TimedLoader` - per-batch data-loader wait time.

See docs/torch.md.
"""

from telemetry.torch.collective import CollectiveProgress
from telemetry.torch.device_values import StagedValues, stage
from telemetry.torch.flops import flops_per_step
from telemetry.torch.grad import grad_norm
from telemetry.torch.loader import TimedLoader
from telemetry.torch.peak import mfu, peak_flops

__all__ = [
    "CollectiveProgress",
    "StagedValues",
    "TimedLoader",
    "flops_per_step",
    "grad_norm",
    "mfu",
    "peak_flops",
    "stage",
]
