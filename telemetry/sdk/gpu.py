"""Which GPU this rank uses, named so that its node agent can find it in NVML.

The agent files a rank's GPU readings (temperature, clocks, ECC, XIDs) under the rank's job only when it
knows the rank's GPU (collectors/agent/hardware.py maps a UUID, or a bare index, to NVML's index); otherwise
they stay in the fleet's windows and the job's dashboard shows no hardware. ``telemetry.init()`` has no
``device`` argument in the README's lines, so it is found here: measured on an H100, a rank that did not pass
one had its GPU's readings in the fleet only, never in its job (bench/gpu_check.py, e2e).

Never initialises CUDA: a CUDA call made before the script's ``torch.cuda.set_device`` would create a
context on GPU 0 from every rank. So only where the script already initialised CUDA (torch imported by it,
``torch.cuda.is_initialized()``) is the current device's UUID read, and only when the current device is the
one this local rank is expected to use (``local_rank % device_count()``, or the only one): a script that never
calls ``set_device`` and moves tensors with ``.to(f"cuda:{local_rank}")`` leaves the current device 0 on every
rank, which would file GPU 0's readings under all of them (one log line says to pass ``device=`` then). Else a
UUID the launcher put in ``CUDA_VISIBLE_DEVICES`` for this local rank; else nothing (a bare CUDA index is not
NVML's index in general: CUDA orders devices fastest first and renumbers them under ``CUDA_VISIBLE_DEVICES``).
A MIG instance's UUID as torch gives it was not checked against what the agent's NVML lists.
"""

from __future__ import annotations

import logging
import os
import sys

__all__ = ["rank_device"]

log = logging.getLogger(__name__)


def rank_device(local_rank: int) -> str:
    """The GPU's UUID (``GPU-...``/``MIG-...``), or "" when it cannot be known without touching CUDA."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            cuda = torch.cuda
            if cuda.is_initialized():
                current, count = cuda.current_device(), cuda.device_count()
                if count == 1 or current == local_rank % max(count, 1):
                    uuid = str(cuda.get_device_properties(current).uuid)
                    if uuid:
                        return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
                else:
                    log.info("telemetry: local rank %d's current CUDA device is %d of %d, not the one it would use; "
                             "its GPU readings stay in the fleet's windows (pass telemetry.init(device=...))",
                             local_rank, current, count)
        except Exception:  # an old torch without .uuid, a broken driver: the agent simply cannot map the rank
            pass
    visible = [entry.strip() for entry in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if entry.strip()]
    if 0 <= local_rank < len(visible) and visible[local_rank].startswith(("GPU-", "MIG-")):
        return visible[local_rank]
    return ""
