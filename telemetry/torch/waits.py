"""Per step, how long this rank waited for its peers in collectives, and how long it worked.

Under synchronous collectives every rank's wall ``step_time`` is the slowest rank's, so step time cannot
name the slow rank. What differs is where each rank spends the step: the slow rank works while the others
wait for it, in whichever collective of the step (an FSDP all-gather, a DDP gradient bucket, an
all-reduce of the loss for logging, a tensor-parallel subgroup's all-reduce). So per step the SDK logs

* ``collective_wait``: seconds of the step during which this rank had a collective issued and not yet
  complete, over every collective of every process group (the measure of the union of the collectives'
  [issued, completed] intervals, clipped to the step). A collective completes when the last rank has
  issued it (and the data moved), so the rank that arrives last at a collective has it outstanding
  for the transfer only, the others for as long as they waited for it. Asynchronous collectives count
  from issue to completion whether or not the host overlapped them with work (DDP's buckets during the
  backward, FSDP's prefetched all-gathers): the rank that issued early still waited for the late one.
* ``work_time``: ``step_time - collective_wait``, the rest of the step.

Across ranks the root's summary of ``collective_wait`` is exact where it matters: ``argmin`` is the
rank the others waited for and ``p50 - min`` how long the median rank waited for it.

How the intervals are taken (torch 2.13; measured on gloo, designed-not-verified on NCCL): the public
collective entry points of ``torch.distributed`` (``all_reduce``, ``all_gather_into_tensor``,
``reduce_scatter_tensor``, FSDP2's ``all_gather_single`` / ``reduce_scatter_single``, ``broadcast``,
``barrier``, point-to-point, ...) are wrapped once per process: a synchronous call is outstanding from
call to return; an asynchronous one (``async_op=True``) from call to its future's completion callback.
DDP issues its gradient buckets from C++, past any Python entry point, so a DDP model gets the default
all-reduce as a Python communication hook (``default_hooks.allreduce_hook`` on its own process group:
the same all-reduce, through ``dist.all_reduce``) at its first forward; a hook the user registers later
replaces it (DDP allows one), a hook registered before is left alone (its buckets then go unseen
unless it calls ``dist.*`` itself). Why not the flight recorder: with gloo its entries have no
completion time (``time_discovered_completed_ns`` is 0 in 2.13) and reading them needs a dump of the
whole ring (~100-200 ms for 2,000 entries here); ``pg_status`` is cheap but only counts. Collectives
issued below Python (DTensor's functional collectives, e.g. ``clip_grad_norm_`` on FSDP2's sharded
gradients, and ``torch.compile``-d code) are not seen.

No extra collective and no host-device sync: a wrapper reads the monotonic clock twice and appends
one small list; the completion callback writes one number. With NCCL the host does not block in a
collective: a synchronous call returns once enqueued and ``Work.wait()`` makes the current stream wait
(measured on an H100, torch 2.11, NCCL 2.28.9: 25-70 us of host time per all-reduce, bench/gpu_check.py).
So on NCCL, with ``TORCH_NCCL_ENABLE_TIMING=1``, the figure is the collectives' GPU
time instead (telemetry.torch.nccl_timing).
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from telemetry.names import WAIT_METRIC, WORK_METRIC
from telemetry.torch.nccl_timing import DeviceCollectiveTime

__all__ = ["CollectiveTimer", "WAIT_METRIC", "WORK_METRIC", "timer"]

log = logging.getLogger(__name__)


# The collective entry points of torch.distributed that are wrapped (those a torch build lacks are skipped).
ENTRY_POINTS = (
    "all_reduce", "all_reduce_coalesced", "reduce", "broadcast", "barrier", "monitored_barrier",
    "all_gather", "all_gather_into_tensor", "all_gather_coalesced", "all_gather_single", "all_gather_object",
    "reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_single", "all_to_all", "all_to_all_single",
    "gather", "scatter", "gather_object", "scatter_object_list", "broadcast_object_list",
    "send", "recv", "isend", "irecv", "batch_isend_irecv",
)
MAX_PENDING = 100_000  # intervals kept between two steps (a loop without run.step must not grow forever)

_Interval = list[int]  # [issued_ns, completed_ns (0 while outstanding), blocked_from_ns (see CollectiveTimer)]
_DDP = -1  # blocked_from of a DDP bucket: the host blocks on it once its backward issued the last bucket


class CollectiveTimer:
    """The process's collective intervals; one per process (:func:`timer`), installed once.

    Each collective is ``[issued, completed, blocked_from]``: the host is blocked on it from
    ``blocked_from`` to ``completed``. A synchronous call blocks from its call; an asynchronous one from
    the first ``Work.wait()`` on it (0 until then: never waited, it blocked nothing); a DDP bucket from the
    moment its backward issued its last bucket (DDP's finalize waits for every bucket right after the
    backward's last gradient; ``_DDP`` until resolved at the step's exit). ``install()`` wraps the entry
    points and ``Work.wait`` (idempotent, thread-safe); ``measure(start_ns, end_ns)``, called by the
    training thread at a step's exit, returns the seconds of [start, end] the host was blocked on some
    collective (the union of the blocked spans) and how many collectives were issued, and forgets every
    collective that completed (outstanding ones carry over to the next step)."""

    def __init__(self) -> None:
        self._intervals: collections.deque[_Interval] = collections.deque(maxlen=MAX_PENDING)
        self._carry: list[_Interval] = []
        self._works: dict[int, _Interval] = {}  # id(Work) -> its interval, until it completes
        self._lock = threading.Lock()
        self._in_ddp_hook = False
        self.installed = False
        self.seen = 0          # collectives issued since install
        self.ddp_hooked = 0    # DDP models given the timed hook
        self.ddp_unseen = 0    # DDP models whose hook was registered before (their buckets are not seen)
        self.device = DeviceCollectiveTime()  # NCCL: the GPU time of the collectives (nccl_timing.py)

    # -- the training thread's side -------------------------------------------------------------

    def measure(self, start_ns: int, end_ns: int) -> tuple[float | None, int]:
        """Seconds of [start_ns, end_ns] blocked on a collective, and collectives taken. Where NCCL reports
        its works' GPU durations (telemetry.torch.nccl_timing), the GPU collective time of the newest settled
        step instead (None while none settled): on GPUs the host does not block in collectives, kernels wait."""
        intervals = self._intervals
        taken = [intervals.popleft() for _ in range(len(intervals))]  # appends race only on the right
        spans = self._carry + taken
        ddp_last = max((iv[0] for iv in spans if iv[2] == _DDP), default=0)
        clipped: list[tuple[int, int]] = []
        for issued, done, blocked_from in spans:
            if blocked_from == _DDP:
                blocked_from = ddp_last
            if blocked_from <= 0:
                continue  # not waited on (yet)
            lo, hi = max(issued, blocked_from, start_ns), min(done or end_ns, end_ns)
            if hi > lo:
                clipped.append((lo, hi))
        # Outstanding ones carry over as the very lists their completion callbacks will write into.
        self._carry = [iv for iv in spans if iv[1] == 0][-MAX_PENDING:]
        clipped.sort()
        total, cur_lo, cur_hi = 0, 0, -1
        for lo, hi in clipped:
            if lo > cur_hi:
                if cur_hi > cur_lo:
                    total += cur_hi - cur_lo
                cur_lo, cur_hi = lo, hi
            elif hi > cur_hi:
                cur_hi = hi
        if cur_hi > cur_lo:
            total += cur_hi - cur_lo
        if self.device.attach():
            settled = self.device.step(start_ns, end_ns)
            return (settled[0] if settled is not None else None), len(taken)
        return total / 1e9, len(taken)

    # -- installing -----------------------------------------------------------------------------

    def install(self) -> bool:
        """Wrap torch.distributed's entry points, ``Work.wait`` and DDP (once per process); False when
        torch.distributed is unavailable."""
        with self._lock:
            if self.installed:
                return True
            try:
                import torch.distributed as dist
            except ImportError:
                return False
            if not dist.is_available():
                return False
            for name in ENTRY_POINTS:
                original = getattr(dist, name, None)
                if callable(original) and not getattr(original, "_telemetry_timed", False):
                    setattr(dist, name, self._timed(original))
            self._time_waits(dist.Work)
            self._hook_ddp()
            self.installed = True
            return True

    def _timed(self, original: Callable[..., Any]) -> Callable[..., Any]:
        clock, intervals, works = time.perf_counter_ns, self._intervals, self._works

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            issued = clock()
            out = original(*args, **kwargs)
            interval = [issued, clock(), issued]
            self.seen += 1
            if out is not None:
                handles = out if isinstance(out, list) else [out]
                try:
                    futures = [w.get_future() for w in handles if hasattr(w, "get_future")]
                except Exception:  # a backend's Work without a future: blocked until it returned
                    futures = []
                if futures:
                    interval[1] = 0
                    interval[2] = _DDP if self._in_ddp_hook else 0
                    keys = [id(w) for w in handles]
                    for key in keys:
                        works[key] = interval
                    pending = [len(futures)]

                    def done(_: Any, interval: _Interval = interval, pending: list[int] = pending,
                             keys: list[int] = keys) -> None:
                        pending[0] -= 1
                        if pending[0] <= 0:
                            interval[1] = clock()
                            for key in keys:
                                if works.get(key) is interval:
                                    del works[key]
                    try:
                        for future in futures:
                            future.add_done_callback(done)
                    except Exception:  # no usable future after all: blocked until it returned
                        interval[1], interval[2] = interval[1] or clock(), issued
            intervals.append(interval)
            return out

        timed._telemetry_timed = True  # type: ignore[attr-defined]  # marks a wrapper: never wrap twice
        return timed

    def _time_waits(self, work_type: Any) -> None:
        """``Work.wait()`` marks when the host began to block on an asynchronous collective."""
        original = work_type.wait
        if getattr(original, "_telemetry_timed", False):
            return
        works, clock = self._works, time.perf_counter_ns

        def wait(work: Any, *args: Any, **kwargs: Any) -> Any:
            interval = works.get(id(work))
            if interval is not None and interval[2] == 0:
                interval[2] = clock()
            return original(work, *args, **kwargs)

        wait._telemetry_timed = True  # type: ignore[attr-defined]  # marks a wrapper: never wrap twice
        work_type.wait = wait

    def _hook_ddp(self) -> None:
        """Give DDP models the default all-reduce as a Python hook (through the timed ``dist.all_reduce``)
        at their first forward; a hook the user registers afterwards takes its place."""
        try:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
            from torch.nn.parallel import DistributedDataParallel as DDP
        except ImportError:
            return
        if getattr(DDP, "_telemetry_timed", False):
            return
        forward: Any = DDP.forward
        register: Any = DDP.register_comm_hook
        register_builtin: Any = DDP._register_builtin_comm_hook
        owner = self

        def user_hook(model: Any) -> list[Any] | None:
            return getattr(model, "_telemetry_hook", None)

        def hook(slot, bucket):  # type: ignore[no-untyped-def]  # DDP checks the annotations: keep none
            state, inner = slot
            owner._in_ddp_hook = True  # the hook runs on the backward's thread, the collectives it issues too
            try:
                return inner(state, bucket)
            finally:
                owner._in_ddp_hook = False

        def timed_forward(model: Any, *inputs: Any, **kwargs: Any) -> Any:
            if user_hook(model) is None and not getattr(model, "_telemetry_unhooked", False):
                slot = [model.process_group, default_hooks.allreduce_hook]
                try:
                    register(model, slot, hook)
                    model._telemetry_hook = slot
                    owner.ddp_hooked += 1
                except (RuntimeError, ValueError) as e:  # the user registered a hook first
                    model._telemetry_unhooked = True
                    owner.ddp_unseen += 1
                    log.debug("telemetry: DDP model keeps its own comm hook (%s); its buckets are not timed", e)
            return forward(model, *inputs, **kwargs)

        def timed_register(model: Any, state: object, user: Callable[..., Any]) -> None:
            slot = user_hook(model)
            if slot is None and not getattr(model, "_telemetry_unhooked", False):
                # Before the first forward: the user's hook goes in through ours, so the collectives it issues
                # are the backward's buckets (SyncWaitClock, PowerSGD, compression hooks: all through dist.*).
                slot = [state, user]
                register(model, slot, hook)
                model._telemetry_hook = slot
                owner.ddp_hooked += 1
                return
            if slot is None or slot[1] is not default_hooks.allreduce_hook:
                register(model, state, user)
                return
            slot[:] = [state, user]  # ours was the default: the user's hook takes its place

        def timed_register_builtin(model: Any, comm_hook_type: Any) -> None:
            slot = user_hook(model)
            if slot is None or slot[1] is not default_hooks.allreduce_hook:
                register_builtin(model, comm_hook_type)
                return
            name = getattr(comm_hook_type, "name", str(comm_hook_type))
            python_twin = {"ALLREDUCE": default_hooks.allreduce_hook,
                           "FP16_COMPRESS": default_hooks.fp16_compress_hook}.get(name)
            if python_twin is None:
                raise RuntimeError(f"telemetry timed this DDP model's all-reduce; builtin hook {name} has no "
                                   "Python twin: register it before the first forward")
            slot[:] = [model.process_group, python_twin]

        functools.update_wrapper(timed_forward, forward)
        # Class-wide, so models built before this ran are covered too; the user's hook replaces ours.
        for name, wrapper in (("forward", timed_forward), ("register_comm_hook", timed_register),
                              ("_register_builtin_comm_hook", timed_register_builtin)):
            setattr(DDP, name, wrapper)
        DDP._telemetry_timed = True  # type: ignore[attr-defined]  # installed once per process

_TIMER = CollectiveTimer()


def timer() -> CollectiveTimer:
    """The process's timer (install it with ``timer().install()``)."""
    return _TIMER
