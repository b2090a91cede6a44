"""Per step, how long this rank's step thread was runnable but not running: its run-queue wait.

A rank that is *descheduled* (another process, or another rank, held the CPU it was ready to run on) makes
its peers wait in the step's collectives exactly as a *slow* rank does: on `collective_wait` alone the two
look the same (measured on real torchrun jobs on an oversubscribed 2-core machine: bench/detection_jobs/
runqueue.py). What differs is where the rank's extra time went: a slow rank (a throttled GPU, a slow NIC, a
sleep, more work) spends it running or blocked; a descheduled one spends it on the run queue. Linux counts
the second per thread in ``/proc/thread-self/schedstat`` (its 2nd field: nanoseconds spent waiting on a run
queue; present when the kernel has ``CONFIG_SCHED_INFO``, which every mainstream distribution kernel sets).
So at each step's entry and exit the SDK reads it for the thread that runs the step and logs the difference
as ``runqueue_wait`` (seconds; telemetry.names.RUNQUEUE_METRIC), beside ``collective_wait``. The straggler
rule discounts the part of a rank's lead over its peers that its excess run-queue wait explains
(docs/detectors.md, "straggler").

The same read gives the file's 1st field, the nanoseconds the thread ran on a CPU, logged as ``oncpu_time``
(telemetry.names.ONCPU_METRIC): on a host where every runnable thread gets 1/L of a CPU a thread queues (L - 1)
times its CPU time, so a rank doing more CPU work per step than its peers (a real CPU-bound straggler) also
queues more, in proportion, and its excess run-queue wait must not excuse it; one that queues more for the same
CPU work was descheduled. The rules that weigh a rank's run-queue wait scale the median rank's by the rank's
CPU work over the median's (docs/detectors.md, "CPU work is not descheduling").

What it sees and what it does not: the step thread only. torch's intra-op threads (one per rank under
torchrun: ``OMP_NUM_THREADS=1``) and gloo's transport threads are not read (a rank whose compute runs on
intra-op pool threads that wait for a CPU is seen only where the step thread itself waits to run). A host's
CPU starvation by a neighbour is the kernel's run queue; a slow GPU kernel, a slow NIC, a page-fault storm,
or a lock held by another thread are not (those are the rank's own slowness: still named).

What it costs: one ``pread`` of a ~30-byte procfs file on an open descriptor, twice a step, both figures from the one
read (measured by bench/runqueue_cost.py). Each thread keeps its own descriptor (threading.local). A step entered on one
thread and exited on another logs nothing (the two counters are of different threads). Where the file is missing (not
Linux, a kernel without schedstats) nothing is logged.
"""

from __future__ import annotations

import os
import sys
import threading

PATH = "/proc/thread-self/schedstat"


class _Descriptor(threading.local):
    """The calling thread's open schedstat file: one per thread (a descriptor shared between threads could be
    reopened by one while another reads it, and read the other thread's counters)."""

    fd = -1
    thread: int | None = None
    pid = -1  # a forked child inherits the descriptor of its parent's thread: reopened


class RunQueueClock:
    """The run-queue wait of the thread that calls it, in nanoseconds since that thread began (None where the
    kernel does not count it). One per Run; each thread reads its own descriptor. `mark()` at a step's entry
    and `since(mark)` at its exit give the step's wait, or None when it exited on another thread than it began
    on (the two counters are of different threads: their difference means nothing)."""

    def __init__(self, path: str = PATH) -> None:
        self.path = path
        self._local = _Descriptor()
        self._lock = threading.Lock()
        self._open_fds: set[int] = set()  # every thread's, for close()
        # Linux only: the file is Linux's, and os.O_CLOEXEC does not exist everywhere (an AttributeError out of
        # Run.step on another OS)
        self.available = sys.platform.startswith("linux")

    def mark(self) -> tuple[int, int, int] | None:
        """(the calling thread's id, its run-queue wait so far, its time on a CPU so far), or None
        (unavailable)."""
        both = self.read_both_ns()
        return None if both is None else (threading.get_native_id(), both[1], both[0])

    def since(self, mark: tuple[int, int, int] | None) -> float | None:
        """Seconds the calling thread waited on the run queue since `mark`; None without a mark, unavailable, or
        on another thread than the mark's."""
        spent = self.spent(mark)
        return None if spent is None else spent[0]

    def spent(self, mark: tuple[int, int, int] | None) -> tuple[float, float] | None:
        """(seconds on the run queue, seconds on a CPU) of the calling thread since `mark`, from one read; None
        without a mark, unavailable, or on another thread than the mark's."""
        if mark is None or mark[0] != threading.get_native_id():
            return None
        both = self.read_both_ns()
        if both is None:
            return None
        return max(0, both[1] - mark[1]) / 1e9, max(0, both[0] - mark[2]) / 1e9

    def read_ns(self) -> int | None:
        """The calling thread's total run-queue wait so far, or None (unavailable: never again tried)."""
        both = self.read_both_ns()
        return None if both is None else both[1]

    def read_both_ns(self) -> tuple[int, int] | None:
        """The calling thread's (time on a CPU, run-queue wait) so far, in nanoseconds, from one read of its
        schedstat file; None when unavailable (never again tried)."""
        if not self.available:
            return None
        local = self._local
        thread, pid = threading.get_native_id(), os.getpid()  # the kernel's thread id: Python's idents are reused
        try:
            if thread != local.thread or pid != local.pid:
                self._open(thread, pid)
            try:
                data = os.pread(local.fd, 128, 0)
            except OSError:  # a descriptor of a thread that ended (its id reused): once more, freshly opened
                self._open(thread, pid)
                data = os.pread(local.fd, 128, 0)
            fields = data.split()
            return int(fields[0]), int(fields[1])
        except (OSError, IndexError, ValueError, AttributeError):
            self.available = False
            self.close()
            return None

    def _open(self, thread: int, pid: int) -> None:
        local = self._local
        if local.fd >= 0:  # in a forked child, its copy of the parent's: the parent's own stays open
            self._close_fd(local.fd)
        local.fd, local.thread, local.pid = -1, None, -1
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        with self._lock:
            self._open_fds.add(fd)
        local.fd, local.thread, local.pid = fd, thread, pid

    def _close_fd(self, fd: int) -> None:
        with self._lock:
            self._open_fds.discard(fd)
        try:
            os.close(fd)
        except OSError:
            pass

    def close(self) -> None:
        """Close every thread's descriptor (a thread reading after this reopens its own)."""
        with self._lock:
            fds, self._open_fds = self._open_fds, set()
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._local.fd, self._local.thread, self._local.pid = -1, None, -1
