"""Wire the torch helpers into a :class:`telemetry.Run` in one call.

    dist.init_process_group(...)
    run = telemetry.init()
    telemetry.torch.integration.attach(run)     # heartbeats now carry collective progress

:func:`attach` appends a :class:`~telemetry.torch.collective.CollectiveProgress` reader to
``run.heartbeat_extras``, so the SDK's 1 s heartbeat carries ``collective.last_enqueued`` and
``collective.last_completed`` for the default process group (read on the heartbeat thread, never
on the training thread). Across ranks those two numbers localise a hang: the rank whose
``last_enqueued`` is behind never reached the collective the others wait in.

Everything degrades quietly: without ``torch.distributed``, or before ``init_process_group``,
:func:`attach` attaches nothing and returns None (call it again after initialising); a reader
that cannot read (recorder off, no dump API) makes the heartbeat carry nothing extra.

:class:`SyncWaitClock` answers a different question: how long this rank sat blocked in DDP's
gradient all-reduce waiting for its peers. In synchronous data parallelism every rank's *wall*
step time converges to the slowest rank's (the others wait for it at the all-reduce), so
``step_time`` alone cannot say which rank is slow; ``step_time - sync_wait`` (the rank's own
work) can. The clock is a DDP communication hook around the default all-reduce that stamps the
moment each gradient bucket becomes ready; the host-side wait is the time from the last stamp to
``backward()`` returning. It is meaningful where the host blocks in the all-reduce (CPU / gloo);
with NCCL the host does not wait there (the stream does), so it is not installed on CUDA models.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from telemetry.torch.collective import CollectiveProgress

__all__ = ["SyncWaitClock", "attach", "detach", "enable_flight_recorder"]

log = logging.getLogger(__name__)

_FR_ENV = "TORCH_FR_BUFFER_SIZE"
_FR_DEFAULT_ENTRIES = 2000


def enable_flight_recorder(entries: int = _FR_DEFAULT_ENTRIES) -> None:
    """Make sure PyTorch's flight recorder is on (``TORCH_FR_BUFFER_SIZE``), unless the user set it.

    Must run before the first ``init_process_group`` (the recorder reads the variable once).
    torch 2.13 already defaults to 2,000 entries; older releases defaulted to 0 for NCCL.
    """
    if os.environ.get(_FR_ENV) is None and os.environ.get("TORCH_NCCL_TRACE_BUFFER_SIZE") is None:
        os.environ[_FR_ENV] = str(int(entries))


def _attached(run: Any) -> CollectiveProgress | None:
    for extra in getattr(run, "heartbeat_extras", ()):
        owner = getattr(extra, "__self__", None)
        if isinstance(owner, CollectiveProgress):
            return owner
    return None


def attach(run: Any, progress: CollectiveProgress | None = None, *,
           require_initialized: bool = True) -> CollectiveProgress | None:
    """Add the default group's collective progress to ``run``'s heartbeats; returns the reader.

    Returns None (attaching nothing) when torch.distributed is unavailable, or when it is not
    initialised yet and ``require_initialized`` is true (the default). With
    ``require_initialized=False`` the reader is attached anyway and reports nothing until a
    process group exists. Calling it twice on the same run attaches one reader.
    """
    found = _attached(run)
    if found is not None:
        return found
    try:
        import torch.distributed as dist
    except ImportError:
        log.debug("telemetry: torch.distributed is not importable; no collective progress")
        return None
    if not dist.is_available():
        log.debug("telemetry: torch.distributed is not available in this build; no collective progress")
        return None
    if require_initialized and not dist.is_initialized():
        log.debug("telemetry: attach() before init_process_group(); no collective progress attached")
        return None
    reader = progress if progress is not None else CollectiveProgress()
    run.heartbeat_extras.append(reader.read)
    return reader


def detach(run: Any) -> bool:
    """Remove a reader :func:`attach` added; True if there was one."""
    extras = getattr(run, "heartbeat_extras", None)
    if not extras:
        return False
    kept = [e for e in extras if not isinstance(getattr(e, "__self__", None), CollectiveProgress)]
    removed = len(kept) != len(extras)
    extras[:] = kept
    return removed


class SyncWaitClock:
    """Host-side seconds a rank spends blocked in DDP's gradient all-reduce (CPU / gloo models).

        clock = SyncWaitClock.install(ddp_model)   # None on CUDA models or without DDP
        t = time.perf_counter(); loss.backward(); wait = clock.wait_since_ready(time.perf_counter())

    ``install`` registers a communication hook (``register_comm_hook``; once per model, before
    the first backward) that stamps ``last_ready`` (``time.perf_counter()``) when a bucket is
    handed to the all-reduce and then runs the default all-reduce hook unchanged.
    """

    __slots__ = ("last_ready", "buckets")

    def __init__(self) -> None:
        self.last_ready = 0.0
        self.buckets = 0

    @classmethod
    def install(cls, ddp_model: Any) -> SyncWaitClock | None:
        try:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        except ImportError:
            return None
        register = getattr(ddp_model, "register_comm_hook", None)
        param = next(iter(ddp_model.parameters()), None) if hasattr(ddp_model, "parameters") else None
        if register is None or param is None or param.device.type != "cpu":
            return None
        clock = cls()

        def hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks the annotations: keep none
            state.last_ready = time.perf_counter()
            state.buckets += 1
            return default_hooks.allreduce_hook(None, bucket)  # type: ignore[arg-type]  # None: the default group

        try:
            register(clock, hook)
        except (RuntimeError, ValueError) as e:  # e.g. another comm hook already registered
            log.warning("telemetry: cannot time the gradient all-reduce (%s); no sync_wait", e)
            return None
        return clock

    def wait_since_ready(self, backward_returned: float) -> float:
        """Seconds from the last bucket becoming ready to ``backward_returned`` (>= 0)."""
        if not self.last_ready:
            return 0.0
        return max(0.0, backward_returned - self.last_ready)
