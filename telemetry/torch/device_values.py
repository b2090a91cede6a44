"""Log tensors without a host-device synchronisation on the training thread.

``run.log(step, loss=loss_tensor)`` must not call ``loss.item()`` on the training thread: for a
CUDA tensor that blocks the CPU until every kernel queued before it has run, which removes the
CPU's lead over the GPU and costs real step time. Instead :func:`stage` (called on the training
thread) only *enqueues* work:

1. every CUDA scalar of one device is packed into ONE device tensor (``torch.stack`` of the
   0-d views, then one cast to float64) - two kernel launches however many values;
2. that tensor is copied into a pinned host buffer with ``non_blocking=True`` (a
   ``cudaMemcpyAsync`` that returns immediately because the destination is page-locked);
3. a CUDA event is recorded on the same stream, right after the copy.

The SDK's background thread then polls :meth:`StagedValues.ready` (``event.query()``, which never
blocks) and calls :meth:`StagedValues.read` once it is true, reading plain Python floats out of
the pinned buffer. Nothing here waits on the GPU from the training thread.

CPU tensors are read directly with ``.item()`` (no device to wait for). Plain ``int``/``float``
values (and anything else that is a real number, e.g. numpy scalars) pass through as floats.
Tensors on other accelerator types (not CPU, not CUDA/ROCm) are read with ``.item()`` too, which
*does* synchronise; only CUDA has the asynchronous path.
"""

from __future__ import annotations

import numbers
import threading
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["StagedValues", "stage"]

# Pinned host buffers are returned here once read, keyed by length, so a steady stream of log()
# calls with the same set of tensors allocates none after the first few steps.
_POOL_PER_SIZE = 8
_pool: dict[int, list[torch.Tensor]] = {}
_pool_lock = threading.Lock()
_HOST_DTYPE = torch.float64  # exact for every float dtype and for integers up to 2**53


def _take_pinned(n: int) -> torch.Tensor:
    with _pool_lock:
        free = _pool.get(n)
        if free:
            return free.pop()
    return torch.empty(n, dtype=_HOST_DTYPE, pin_memory=True)


def _give_back_pinned(buf: torch.Tensor) -> None:
    with _pool_lock:
        free = _pool.setdefault(buf.numel(), [])
        if len(free) < _POOL_PER_SIZE:
            free.append(buf)


class _PendingCopy:
    """One device's values on their way to a pinned host buffer."""

    __slots__ = ("names", "host", "event")

    def __init__(self, names: list[str], host: torch.Tensor, event: Any) -> None:
        self.names = names
        self.host = host
        self.event = event


class StagedValues:
    """Values from one ``log()`` call; device values may still be in flight.

    ``ready()`` and ``read()`` are meant for the SDK's background thread. ``read()`` before
    ``ready()`` is allowed: it then waits on the CUDA event, which blocks only the calling thread.
    ``read()`` may be called more than once; it returns the same floats each time.
    """

    __slots__ = ("_order", "_host_values", "_pending", "_result", "_lock")

    def __init__(self, order: list[str], host_values: dict[str, float],
                 pending: list[_PendingCopy]) -> None:
        self._order = order
        self._host_values = host_values
        self._pending = pending
        self._result: dict[str, float] | None = None if pending else {k: host_values[k] for k in order}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """How many values (the SDK counts them when its buffer drops this record)."""
        return len(self._order)

    def ready(self) -> bool:
        """True once every device-to-host copy has landed (never blocks)."""
        if self._result is not None:
            return True
        return all(p.event.query() for p in self._pending)

    def read(self) -> dict[str, float]:
        """The values as Python floats, in the order they were given to :func:`stage`."""
        if self._result is not None:
            return dict(self._result)
        with self._lock:
            if self._result is None:
                values = dict(self._host_values)
                for p in self._pending:
                    if not p.event.query():
                        p.event.synchronize()  # blocks this (background) thread only
                    for name, value in zip(p.names, p.host.tolist()):
                        values[name] = float(value)
                    _give_back_pinned(p.host)
                self._pending = []
                self._result = {k: values[k] for k in self._order}
        return dict(self._result)

    def __repr__(self) -> str:
        state = "ready" if self._result is not None else "in flight"
        return f"StagedValues({', '.join(self._order)}; {state})"


def _scalar_tensor(name: str, t: torch.Tensor) -> torch.Tensor:
    if t.numel() != 1:
        raise ValueError(
            f"telemetry value {name!r} is a tensor of shape {tuple(t.shape)}; only scalars "
            "(0-d or 1-element tensors) can be logged: reduce it first, e.g. .mean() or .norm()")
    if t.is_complex():
        raise ValueError(f"telemetry value {name!r} is a complex tensor; log its real part or abs()")
    if t.device.type == "meta":
        raise ValueError(f"telemetry value {name!r} is a meta tensor and has no value")
    return t


def _stage_cuda(device: torch.device, names: list[str], tensors: list[torch.Tensor]) -> _PendingCopy:
    # Everything below only enqueues work on the current stream of `device`: the stack/cast
    # kernels, the async copy into page-locked memory and the event. Nothing waits for the GPU.
    with torch.no_grad(), torch.cuda.device(device):
        if len(tensors) == 1:
            packed = tensors[0].detach().reshape(1).to(_HOST_DTYPE)
        else:
            packed = torch.stack([t.detach().reshape(()) for t in tensors]).to(_HOST_DTYPE)
        host = _take_pinned(len(tensors))
        host.copy_(packed, non_blocking=True)
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(device))
    # `packed` may be freed now: the caching allocator only reuses its block for work queued
    # later on the same stream, i.e. after the copy. `host` is kept by the _PendingCopy until read.
    return _PendingCopy(names, host, event)


def stage(values: Mapping[str, torch.Tensor | float | int]) -> StagedValues:
    """Start reading ``values`` without synchronising the calling (training) thread.

    Raises ``ValueError`` for a tensor with more than one element (or a complex or meta
    tensor) and ``TypeError`` for a value that is neither a tensor nor a real number.
    """
    order: list[str] = []
    host_values: dict[str, float] = {}
    cuda_groups: dict[torch.device, tuple[list[str], list[torch.Tensor]]] = {}
    for name, value in values.items():
        order.append(name)
        cls = type(value)
        if cls is float or cls is int:  # the common case, without the ABC checks below
            host_values[name] = float(value)
        elif isinstance(value, torch.Tensor):
            if value.is_cuda:
                t = _scalar_tensor(name, value)
                names, tensors = cuda_groups.setdefault(t.device, ([], []))
                names.append(name)
                tensors.append(t)
            else:
                try:  # .item() itself refuses what cannot be one number; the checks run only to say why
                    host_values[name] = float(value.item())
                except (RuntimeError, TypeError, ValueError):
                    _scalar_tensor(name, value)
                    raise
        elif isinstance(value, numbers.Real):
            host_values[name] = float(value)
        else:
            raise TypeError(
                f"telemetry value {name!r} has type {type(value).__name__}; expected a number "
                "or a scalar torch.Tensor")
    pending = [_stage_cuda(dev, names, tensors) for dev, (names, tensors) in cuda_groups.items()]
    return StagedValues(order, host_values, pending)
