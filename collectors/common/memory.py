"""Give the heap's free memory back to the OS after a service forgets finished jobs.

A long-lived service that sees thousands of jobs frees what each one held when it is forgotten
(collectors/delivery/lifecycle.py), but glibc keeps freed chunks in its arenas rather than returning
them, so RSS reads as if the jobs were still there and an SRE cannot tell a leak from a cache.
Measured (bench/soak.py harness, root after 300 short jobs, settled): `malloc_trim(0)` returned 3.3 MB
the root no longer used (72.8 -> 69.5 MiB); tracemalloc showed live Python memory flat. Trimming walks
the arenas (a few ms at these sizes), so it runs only after a sweep forgot something, at most once per
`min_interval_s`. Without glibc (musl, macOS) it does nothing.

Trimming alone is not enough: `malloc_trim` gives back the free top of the main heap and free pages
inside every arena's bins, but not the free top of a thread's arena, and glibc's *dynamic* thresholds
keep those tops large: once a buffer over 128 KiB is freed (the root's /metrics answer with tens of
live jobs is ~160 KB), the mmap threshold rises to its size and the trim threshold to twice that, so
later such buffers come from the arena of the thread that asks and stay there, freed but resident.
The root starts a thread per API request and glibc hands new threads its arenas in turn (up to 8 per
core), so one arena after another grew from 132 KiB to 520-590 KiB, nearly all free. Measured with a
soak-shaped harness (root <- rack <- agent, 1,000 jobs of 2 ranks, /metrics every 50 jobs), settled
RSS from job 100 to job 1,000: 72.0 -> 78.9 MiB (+9.5 %), 6.6 MiB of it in thread arenas (mallinfo
free 6.6 -> 11.8 MB, in use +1.6 MB: the store's page cache reaching its bound, collectors/root/store.py).
With the thresholds fixed at glibc's own defaults (`tune_allocator`, done once by the service's entry point or
the first `FreedMemory`), a buffer over 128 KiB is mmapped and unmapped when freed and an arena's free top over
128 KiB is given back: 72.2 -> 74.7 MiB (+3.4 %), those arenas at 135-164 KiB, free 6.1 -> 6.5 MB.

One arena, not one per thread (`M_ARENA_MAX` 1, set by `tune_allocator` before the service starts its threads):
a tier's buffers are made on one thread and freed on another (the event loop reads a unit, the flush thread
merges and frees it; gRPC's threads fill what the loop frees), so with an arena per thread every such free
takes the other arena's lock and the arenas' heaps grow and shrink in turn (mmap, munmap, madvise, and the pages
faulted back in; a unit's 136 KiB vector of windows was mmapped and unmapped every time). Measured on a rack of
64 agents x 300 metrics (bench/ab.py over bench/tier_cost.py, 5 interleaved rounds, 2 quiet cores): 61.7 -> 49.8
ms of CPU a step (0.81x); perf counted 129,000 page faults in 5 s of its steps with the default arenas (15 thread
arenas in an idle collector), 46,000 with one. The tiers' threads mostly take turns on the GIL, so one arena's
lock is rarely contended; one arena is also the bound on the thread arenas the paragraph above describes (the
soak's RSS: 0.98-1.00x of before, bench/results/ab_arena_soak_s45.json).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


def _libc(name: str, argtypes: list[type], restype: type) -> Callable[..., int] | None:
    """glibc's function `name`, typed; None without it (musl, macOS)."""
    try:
        function = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None
    function.argtypes, function.restype = argtypes, restype
    return function


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_ARENA_MAX = -1, -3, -8  # mallopt parameters (malloc.h)
ARENAS = 1
FIXED_THRESHOLD = 128 * 1024  # glibc's defaults, kept fixed (setting either turns the dynamic adjustment off)
_tuned = False


def tune_allocator(threshold: int = FIXED_THRESHOLD) -> bool:
    """One malloc arena and fixed mmap and trim thresholds (see the module docstring); True when set.
    Process-wide, for a service's own process only (never a training process): call it before the process
    starts threads, since a thread that has allocated keeps the arena it was given."""
    global _tuned
    if _tuned:
        return True
    mallopt = _libc("mallopt", [ctypes.c_int, ctypes.c_int], ctypes.c_int)
    if mallopt is None:
        return False
    _tuned = all([mallopt(M_ARENA_MAX, ARENAS), mallopt(M_MMAP_THRESHOLD, threshold),
                  mallopt(M_TRIM_THRESHOLD, threshold)])
    return _tuned


class FreedMemory:
    """Returns freed heap memory to the OS after jobs are forgotten (see the module docstring)."""

    def __init__(self, min_interval_s: float = 30.0) -> None:
        tune_allocator()  # a no-op when the service's entry point did it first, as it should
        self.min_interval_s = min_interval_s
        self.trims = 0
        self._trim = _libc("malloc_trim", [ctypes.c_size_t], ctypes.c_int)
        self._last = float("-inf")

    def release(self, now: float) -> bool:
        """Call after forgetting jobs (outside any lock); True when memory was trimmed now."""
        if self._trim is None or now - self._last < self.min_interval_s:
            return False
        self._last = now
        self._trim(0)
        self.trims += 1
        return True
