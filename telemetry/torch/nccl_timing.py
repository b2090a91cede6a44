"""On NCCL, how long this rank's collectives ran on the GPU: the wait signal where the host never blocks.

A synchronous NCCL call returns once enqueued and ``Work.wait()`` only makes the current stream wait, so the
host-side intervals of :mod:`telemetry.torch.waits` read ~0 on GPUs (measured on an H100, torch 2.11, NCCL
2.28.9: 25-70 us of enqueue per all-reduce, whatever the peers do). The GPU-side equivalent is the collective
kernel's duration: an NCCL kernel starts when its stream reaches it and spins until every peer joined, so it
runs for the wait for the slowest peer plus the transfer, shortest on the straggler.

c10d reports exactly that for every work of an NCCL group, including those issued from C++ (DDP's native
buckets, DTensor's functional collectives, compiled graphs) that no Python wrapper sees: with
``TORCH_NCCL_ENABLE_TIMING=1`` set before the group is created, ``ProcessGroupNCCL`` records CUDA start/end
events per work, and a hook registered with ``ProcessGroup._register_on_completion_hook`` is called on c10d's
completion thread, never the training thread, with a ``WorkInfo``: ``time_started`` (when the host enqueued
the work, on the monotonic clock) and ``active_duration`` (the events' elapsed time). Measured on the H100:
the hook fires ~0.1 s after the GPU finished the work (c10d's watchdog polls every 100 ms). Every NCCL group
of the process is hooked (the default one and subgroups: a tensor-parallel group's waits count too), found
again whenever the number of groups changes. Without the environment variable c10d refuses the hook (one
log line) and the host-side figure stays in use; a group that already has a hook (c10d allows one; torch
marks the API as to be deprecated in favour of the flight recorder) is left alone.

Each work counts for the step during which the host enqueued it (``time_started``). Because reports arrive
late, a step's figure is given once it has settled: at each step's exit the SDK logs the figure of the newest
step that ended at least ``SETTLE_S`` before (the previous step when steps last longer than that, otherwise an
older one: the same step on every rank of a synchronous job). Works of one step running at once on several
streams add up; a step's figure is clipped to its length.
"""

from __future__ import annotations

import collections
import logging
import threading
from typing import Any

__all__ = ["DeviceCollectiveTime", "SETTLE_S", "TIMING_ENV"]

log = logging.getLogger(__name__)

TIMING_ENV = "TORCH_NCCL_ENABLE_TIMING"
SETTLE_S = 0.25        # c10d's watchdog reports a work up to 0.1 s after the GPU finished it: margin for load
MAX_STEPS = 256        # step intervals kept while their works are reported
MAX_PENDING = 100_000  # reports kept between two step exits (a loop without run.step must not grow forever)


class DeviceCollectiveTime:
    """The GPU durations of the process's NCCL works, per step of the host that enqueued them."""

    def __init__(self, settle_s: float = SETTLE_S) -> None:
        self._lock = threading.Lock()
        self._reports: collections.deque[tuple[int, float]] = collections.deque(maxlen=MAX_PENDING)
        self._steps: collections.deque[list[float]] = collections.deque(maxlen=MAX_STEPS)  # [start, end, ms, works]
        self._settle_ns = int(settle_s * 1e9)
        self._hooked: set[int] = set()   # id() of the groups hooked
        self._groups_seen = -1           # size of c10d's group map at the last scan
        self._refused: set[str] = set()  # why a group could not be hooked (logged once each)
        self.hooked_groups = 0
        self.late = 0                    # works reported after their step's figure was given (or forgotten)

    def hook(self, info: Any) -> None:
        """c10d's completion hook (its thread): the work's enqueue time and GPU duration, both timedeltas."""
        started, duration = info.time_started, info.active_duration
        self._reports.append((round(started.total_seconds() * 1e9), duration.total_seconds() * 1e3))

    def step(self, start_ns: int, end_ns: int) -> tuple[float, int] | None:
        """Called at a step's exit with its bounds (``time.perf_counter_ns``, the clock c10d's ``time_started``
        uses on Linux): (seconds of GPU collective time, works) of the newest settled step not given yet, or
        None when no step settled since the last figure. Call it only once :meth:`attach` hooked a group."""
        steps = self._steps
        steps.append([float(start_ns), float(end_ns), 0.0, 0.0])
        reports = self._reports
        carry: list[tuple[int, float]] = []
        for _ in range(len(reports)):
            started, ms = reports.popleft()
            if ms < 0:
                continue  # a work without both events: no duration
            target, newer = None, None
            for interval in reversed(steps):
                if started >= interval[0]:
                    target = interval if started < interval[1] else newer  # between two steps: the next one
                    break
                newer = interval
            else:
                self.late += 1  # older than every step kept
                continue
            if target is None:
                carry.append((started, ms))  # enqueued after the newest step: the next one will take it
                continue
            target[2] += ms
            target[3] += 1
        reports.extendleft(reversed(carry))
        settled_before = end_ns - self._settle_ns
        chosen = None
        while steps and steps[0][1] <= settled_before:
            chosen = steps.popleft()
        if chosen is None:
            return None
        return min(chosen[2] / 1e3, (chosen[1] - chosen[0]) / 1e9), int(chosen[3])

    def attach(self) -> int:
        """Hook every NCCL group not hooked yet (cheap when the number of groups is unchanged); how many are."""
        try:
            from torch.distributed import distributed_c10d as c10d
        except ImportError:
            return 0
        groups = getattr(getattr(c10d, "_world", None), "pg_map", None)
        if not groups or len(groups) == self._groups_seen:
            return len(self._hooked)
        self._groups_seen = len(groups)
        for pg in list(groups):
            register = getattr(pg, "_register_on_completion_hook", None)
            if register is None or id(pg) in self._hooked:
                continue
            try:
                if pg._get_backend_name() != "nccl":
                    continue
                register(self.hook)
            except Exception as e:  # timing off (ValueError), or the group has a hook already (DistBackendError)
                reason = f"{type(e).__name__}: {e}".splitlines()[0][:200]
                if reason not in self._refused:
                    self._refused.add(reason)
                    log.info("telemetry: no GPU-side collective timing for an NCCL group (%s); set %s=1 before "
                             "init_process_group for it", reason, TIMING_ENV)
                continue
            self._hooked.add(id(pg))
        self.hooked_groups = len(self._hooked)
        return self.hooked_groups
