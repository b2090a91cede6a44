"""Total gradient norm as a device tensor, for logging without a host-device sync."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

__all__ = ["grad_norm"]


def _grads(model_or_params: nn.Module | torch.Tensor | Iterable[torch.Tensor]) -> list[torch.Tensor]:
    if isinstance(model_or_params, nn.Module):
        params: Iterable[torch.Tensor] = model_or_params.parameters()
    elif isinstance(model_or_params, torch.Tensor):
        params = [model_or_params]
    else:
        params = model_or_params
    grads = []
    for p in params:
        g = p.grad
        if g is None:
            continue
        to_local = getattr(g, "to_local", None)  # DTensor (FSDP2/TP): this rank's shard
        if callable(to_local):
            g = to_local()
        grads.append(g.detach())
    return grads


def grad_norm(model_or_params: nn.Module | torch.Tensor | Iterable[torch.Tensor],
              norm_type: float = 2.0) -> torch.Tensor:
    """The total ``norm_type``-norm of all gradients, as a 0-d tensor on the gradients' device.

    Equivalent to the norm of all gradients concatenated into one vector (what
    ``clip_grad_norm_`` returns), computed with ``torch._foreach_norm`` per device and never
    moved to the host: no ``.item()``, so no sync. Log it with ``run.log(step, grad_norm=...)``,
    which reads it asynchronously. Parameters without a gradient are skipped; with none at all
    the result is ``tensor(0.)``. The result is float32 (float64 if any gradient is float64),
    whatever the gradients' dtype, so bf16 gradients do not lose precision in the sum.

    With DDP every rank holds the same (all-reduced) gradients, so every rank logs the same
    value. With sharded gradients (FSDP2/DTensor) this is the norm of *this rank's shard*.
    """
    p = float(norm_type)
    if not (p > 0 or p == -math.inf):
        raise ValueError(f"norm_type must be positive or +-inf, got {norm_type!r}")
    grads = _grads(model_or_params)
    if not grads:
        return torch.zeros(())
    out_dtype = torch.float64 if any(g.dtype == torch.float64 for g in grads) else torch.float32

    by_device: dict[torch.device, list[torch.Tensor]] = {}
    for g in grads:
        by_device.setdefault(g.device, []).append(g)
    per_device = []
    for device_grads in by_device.values():
        norms = torch._foreach_norm(device_grads, p, dtype=out_dtype)
        per_device.append(torch.linalg.vector_norm(torch.stack(norms), p))
    if len(per_device) == 1:
        only: torch.Tensor = per_device[0]
        return only
    # Parameters on several devices (rare: pipeline stages in one process, CPU offload). The
    # partial norms are gathered on an accelerator, never on the CPU (a device-to-host copy
    # would sync): device-to-device copies are only enqueued, and a CPU partial norm goes up
    # with a small host-to-device copy that does not wait for queued kernels.
    target = next((t.device for t in per_device if t.device.type != "cpu"), per_device[0].device)
    gathered = torch.stack([t.to(target, non_blocking=True) for t in per_device])
    total: torch.Tensor = torch.linalg.vector_norm(gathered, p)
    return total
