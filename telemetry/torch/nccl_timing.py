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
late, a step's figure is given ``lag`` steps later: at each step's exit the SDK logs the figure of the step
``lag`` exits before. ``lag`` starts at 1 and doubles, for good, whenever the step it would give has not
ended ``SETTLE_S`` before (that exit logs no figure): so it settles in the first steps on a lag that covers
c10d's delay (1 for steps longer than ``SETTLE_S``, 16 for 22 ms steps), and from then on every exit logs
one figure, the same step on every rank of a synchronous job: ranks at one pace settle on the same power of
two, except where a step lasts within its jitter of ``SETTLE_S / 2**j`` (250, 125, 62.5, ... ms), where two
ranks can settle one doubling apart (their figures then come from different steps of the same shape; a
doubling rather than a step at a time keeps those paces few). Works of one step running at once on several
streams add up; a step's figure is clipped to its length.
"""

from __future__ import annotations

import collections
import logging
from typing import Any

__all__ = ["DeviceCollectiveTime", "SETTLE_S", "TIMING_ENV"]

log = logging.getLogger(__name__)

TIMING_ENV = "TORCH_NCCL_ENABLE_TIMING"
SETTLE_S = 0.25        # c10d's watchdog reports a work up to 0.1 s after the GPU finished it: margin for load
MAX_STEPS = 256        # step intervals kept while their works are reported
# Reports kept between two step exits: a loop without run.step (an evaluation full of collectives) must neither
# grow memory nor make the next step's exit sort through more than ~0.1 s of them (6 us each, measured).
MAX_PENDING = 20_000


class DeviceCollectiveTime:
    """The GPU durations of the process's NCCL works, per step of the host that enqueued them."""

    def __init__(self, settle_s: float = SETTLE_S) -> None:
        self._reports: collections.deque[tuple[int, float]] = collections.deque(maxlen=MAX_PENDING)
        self._steps: collections.deque[list[float]] = collections.deque(maxlen=MAX_STEPS)  # [start, end, ms, works]
        self._settle_ns = int(settle_s * 1e9)
        self._hooked: set[int] = set()         # id() of the groups hooked, among those c10d still has
        self._groups: frozenset[int] = frozenset()  # id() of c10d's groups at the last scan
        self._refused: set[str] = set()        # why a group could not be hooked (logged once each)
        self.lag = 1                           # a step's figure is given this many exits after it
        self.late = 0                          # works reported after their step's figure was given (or forgotten)

    @property
    def hooked_groups(self) -> int:
        return len(self._hooked)

    def hook(self, info: Any) -> None:
        """c10d's completion hook (its thread): the work's enqueue time and GPU duration, both timedeltas."""
        started, duration = info.time_started, info.active_duration
        self._reports.append((round(started.total_seconds() * 1e9), duration.total_seconds() * 1e3))

    def step(self, start_ns: int, end_ns: int) -> tuple[float, int] | None:
        """Called at a step's exit with its bounds (``time.perf_counter_ns``, the clock c10d's ``time_started``
        uses on Linux): (seconds of GPU collective time, works) of the step ``lag`` exits before, or None (the
        first exits, and one exit each time ``lag`` grows). Call it only once :meth:`attach` hooked a group."""
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
        if len(steps) <= self.lag:
            return None
        chosen = steps[-1 - self.lag]
        if chosen[1] > end_ns - self._settle_ns and self.lag < MAX_STEPS - 1:
            self.lag = min(2 * self.lag, MAX_STEPS - 1)  # its works may still be on their way: give steps later
            return None
        while steps[0] is not chosen:
            steps.popleft()
        steps.popleft()
        return min(chosen[2] / 1e3, (chosen[1] - chosen[0]) / 1e9), int(chosen[3])

    def attach(self) -> int:
        """Hook every NCCL group not hooked yet; how many of c10d's current groups are hooked (0: none, so the
        host-side figure is the one to use). Cheap while c10d's groups are unchanged."""
        try:
            from torch.distributed import distributed_c10d as c10d
        except ImportError:
            return 0
        groups = getattr(getattr(c10d, "_world", None), "pg_map", None) or {}
        ids = frozenset(id(pg) for pg in groups)
        if ids == self._groups:
            return len(self._hooked)
        self._groups = ids
        self._hooked &= ids  # a destroyed group's hook went with it; a group re-created is a new one
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
        return len(self._hooked)
