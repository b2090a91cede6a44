"""Count a training step's FLOPs once, with ``torch.utils.flop_counter.FlopCounterMode``.

By default the count runs on the *meta* device: the model is copied with every parameter and
buffer replaced by a meta tensor (no data, no memory, no kernels), the example inputs are moved
to meta, and one forward + backward is traced. FlopCounterMode only looks at shapes, so the count
is the same as on a real device - with one difference that matters (measured with torch 2.13):

* on **CPU**, ``F.scaled_dot_product_attention`` dispatches to
  ``aten._scaled_dot_product_flash_attention_for_cpu``, which has no registered FLOP formula, so
  attention counts **0**;
* on **meta**, SDPA falls back to the math path and is counted through its ``bmm`` calls (the
  same 4*B*H*S*S*D forward FLOPs the CUDA flash/efficient/cuDNN formulas give).

So meta is both cheaper and more complete. Only matmul-like ops (mm, addmm, bmm, baddbmm,
convolution, SDPA variants, _scaled_mm) have formulas; elementwise ops, norms, softmax and the
loss count 0, which is the usual convention for MFU. Causal masking is not discounted.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.flop_counter import FlopCounterMode

__all__ = ["flops_per_step"]


def _unwrap(model: nn.Module) -> nn.Module:
    # torch.compile's OptimizedModule and DDP/DataParallel wrap the module that does the work.
    for _ in range(4):
        inner = getattr(model, "_orig_mod", None)
        if isinstance(inner, nn.Module):
            model = inner
            continue
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
            continue
        break
    return model


def _copy_to(model: nn.Module, device: torch.device) -> nn.Module:
    """A copy of ``model`` on ``device`` that shares no mutable state with it.

    Parameters and buffers are put in deepcopy's memo first, so deepcopy never clones their
    data: on meta this costs no memory at all, and on the model's own device parameters are
    shared read-only (gradients go to the copy's Parameter objects, not the original's).
    Buffers are cloned because a forward pass may update them (BatchNorm running stats).
    Tied weights stay tied because the memo is keyed by object identity.
    """
    memo: dict[int, Any] = {}
    for p in model.parameters():
        if id(p) not in memo:
            memo[id(p)] = nn.Parameter(p.detach().to(device), requires_grad=p.requires_grad)
    for b in model.buffers():
        if id(b) not in memo:
            memo[id(b)] = b.detach().to(device).clone()
    try:
        return copy.deepcopy(model, memo)
    except Exception as e:  # a module holding something deepcopy cannot copy (locks, handles)
        raise TypeError(
            f"flops_per_step could not copy the model ({type(e).__name__}: {e}); build a copy "
            "under `with torch.device('meta'):` and pass that instead") from e


def _default_loss(output: Any) -> torch.Tensor | None:
    loss = getattr(output, "loss", None)  # Hugging Face style ModelOutput
    if isinstance(loss, torch.Tensor):
        return loss
    leaves = [t for t in tree_flatten(output)[0]
              if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if not leaves:
        return None
    total = leaves[0].sum()
    for t in leaves[1:]:
        total = total + t.sum()
    return total


def _call(model: nn.Module, inputs: Any) -> Any:
    if isinstance(inputs, Mapping):
        return model(**inputs)
    if isinstance(inputs, (tuple, list)):
        return model(*inputs)
    return model(inputs)



def flops_per_step(model: nn.Module, example_inputs: Any,
                   loss_fn: Callable[[Any], torch.Tensor] | None = None,
                   device: str | torch.device | None = "meta") -> int:
    """FLOPs of one forward + backward pass of ``model`` on ``example_inputs``.

    ``example_inputs`` is passed as ``model(x)`` for a tensor, ``model(*inputs)`` for a tuple or
    list and ``model(**inputs)`` for a dict; tensors in it (at any depth) are moved to ``device``.
    Use the per-rank batch: the result is per rank, per step (multiply by gradient-accumulation
    micro-steps yourself if a step has several).

    ``loss_fn(output) -> scalar tensor`` turns the output into the loss; by default it is
    ``output.loss`` when the output has one, else the sum of the output's floating tensors. On
    meta, any tensor ``loss_fn`` builds (targets) must be created on ``output.device``. When no
    parameter requires grad and the inputs do not either, only the forward pass is counted.

    ``device`` is where the count runs: ``"meta"`` (default, free; see the module notes), or a
    real device (``"cpu"``, ``"cuda"``) to run the copy for real. ``None`` uses the model's own
    device. The model itself is never modified: no ``.grad`` is set, no buffer is updated.
    """
    model = _unwrap(model)
    if device is None:
        first = next(iter(model.parameters()), None)
        device = first.device if first is not None else torch.device("cpu")
    device = torch.device(device)
    work = _copy_to(model, device)
    inputs = tree_map(lambda x: x.detach().to(device).requires_grad_(x.requires_grad)
                      if isinstance(x, torch.Tensor) else x, example_inputs)

    counter = FlopCounterMode(display=False)
    fork_devices: list[Any] = []
    if device.type == "cuda":
        fork_devices = [device.index if device.index is not None else torch.cuda.current_device()]
    # A real-device run must not consume the training job's RNG stream (dropout).
    with torch.random.fork_rng(devices=fork_devices, enabled=device.type != "meta"):
        try:
            with counter:
                output = _call(work, inputs)
                loss = (loss_fn or _default_loss)(output)
                if loss is not None and loss.requires_grad:
                    if loss.numel() != 1:
                        loss = loss.sum()
                    loss.backward()
        except (NotImplementedError, RuntimeError) as e:
            if device.type == "meta" and (isinstance(e, NotImplementedError) or "meta" in str(e)):
                raise NotImplementedError(
                    f"the model cannot run on the meta device ({e}); it probably reads a tensor "
                    "value (e.g. .item()) in forward. Pass device='cpu' or the model's device") from e
            raise
    return int(counter.get_total_flops())
