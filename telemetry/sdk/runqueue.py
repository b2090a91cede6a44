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

What it sees and what it does not: the step thread only. torch's intra-op threads (one per rank under
torchrun: ``OMP_NUM_THREADS=1``) and gloo's transport threads are not read (a rank whose compute runs on
intra-op pool threads that wait for a CPU is seen only where the step thread itself waits to run). A host's
CPU starvation by a neighbour is the kernel's run queue; a slow GPU kernel, a slow NIC, a page-fault storm,
or a lock held by another thread are not (those are the rank's own slowness: still named).

What it costs: one ``pread`` of a ~30-byte procfs file on an open descriptor, twice a step (measured by
bench/runqueue_cost.py). The descriptor is the step thread's: a step run on another thread reopens it.
Where the file is missing (not Linux, a kernel without schedstats) nothing is logged.
"""

from __future__ import annotations

import os
import threading

PATH = "/proc/thread-self/schedstat"


class RunQueueClock:
    """The run-queue wait of the thread that calls it, in nanoseconds since that thread began (None where the
    kernel does not count it). One per Run; the descriptor follows the calling thread."""

    def __init__(self, path: str = PATH) -> None:
        self.path = path
        self._fd = -1
        self._thread: int | None = None
        self._pid = -1  # a forked child inherits the descriptor of its parent's thread: reopened
        self.available = True

    def read_ns(self) -> int | None:
        """The calling thread's total run-queue wait so far, or None (unavailable: never again tried)."""
        if not self.available:
            return None
        thread, pid = threading.get_native_id(), os.getpid()  # the kernel's thread id: Python's idents are reused
        try:
            if thread != self._thread or pid != self._pid:
                self._open(thread, pid)
            try:
                data = os.pread(self._fd, 128, 0)
            except OSError:  # a descriptor of a thread that ended (its id reused): once more, freshly opened
                self._open(thread, pid)
                data = os.pread(self._fd, 128, 0)
            return int(data.split()[1])
        except (OSError, IndexError, ValueError):
            self.available = False
            self.close()
            return None

    def _open(self, thread: int, pid: int) -> None:
        self.close()
        self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        self._thread, self._pid = thread, pid

    def close(self) -> None:
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd, self._thread, self._pid = -1, None, -1
