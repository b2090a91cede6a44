"""Collective progress of the default process group, read from PyTorch's flight recorder.

Every c10d backend that records into the flight recorder keeps, per process group, the sequence
number of the last collective *enqueued* by this rank and of the last one it saw *complete*
(``pg_status`` in the recorder's JSON dump). Sent with the heartbeat, these two numbers localise
a hang without any extra collective: the rank whose ``last_enqueued`` is behind the others never
reached the collective everybody else is waiting in; ranks with ``last_enqueued`` >
``last_completed`` are blocked inside it.

Where the numbers come from (measured with torch 2.13.0, CPU wheel, gloo, 2 processes):

* ``torch._C._distributed_c10d._dump_fr_trace_json(includeCollectives=False, onlyActive=True)``
  returns ``{"pg_status": {"<pg_id>": {"last_enqueued_collective": "3",
  "last_completed_collective": "2", "last_started_collective": "-1"}}, ...}`` in a few
  microseconds. The numbers are strings; only collectives count (send/recv have their own p2p
  sequence); ``last_started`` stays -1 with gloo.
* Completion is recorded by the backend's own thread a moment after the work finishes, so
  ``last_completed`` can trail a just-returned synchronous collective by microseconds to
  (NCCL watchdog) ~100 ms. That is noise at a 1 s heartbeat.
* The key is the backend's process-local pg id, not the group name, and ids are never reused:
  after ``destroy_process_group()`` and a new ``init_process_group()`` the stale entry for the
  old group stays in ``pg_status`` and the new default group gets a new id. The id of the
  current default group is found once from the recorder's entries (``process_group`` holds
  ``[group_name, group_desc]``, ``pg_id`` the key), then cached.
* The recorder is on by default in torch 2.13 (``TORCH_FR_BUFFER_SIZE`` defaults to 2000
  entries); ``TORCH_FR_BUFFER_SIZE=0`` (or the deprecated ``TORCH_NCCL_TRACE_BUFFER_SIZE=0``)
  set before the process group is created turns it off and ``pg_status`` stays empty.
* NCCL process groups record into a separate, CUDA-event based recorder, dumped by
  ``_dump_nccl_trace_json`` in CUDA builds (absent from CPU wheels). Both dumps are tried, NCCL
  first when the default group has an NCCL backend; whichever holds the default group is used.

Everything degrades quietly: no torch.distributed, not initialised, no dump API, recorder off,
no collective yet - :meth:`CollectiveProgress.read` returns None and logs the reason once at
debug level. ``read()`` is safe to call from any thread (the SDK heartbeat thread calls it every
second): the dumps take the recorder's own mutex, and this object's state is behind a lock.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from telemetry.names import ARRIVAL_METRIC as ARRIVAL  # per-step metric, see ArrivalClock

__all__ = ["ARRIVAL", "ArrivalClock", "CollectiveProgress", "ENQUEUED", "COMPLETED"]

log = logging.getLogger(__name__)

ENQUEUED = "collective.last_enqueued"
COMPLETED = "collective.last_completed"

_GENERIC_DUMP = "_dump_fr_trace_json"
_NCCL_DUMP = "_dump_nccl_trace_json"


class CollectiveProgress:
    """Reads the default process group's collective sequence numbers from the flight recorder.

    ``read()`` returns ``{"collective.last_enqueued": n, "collective.last_completed": m}`` as
    floats, or None when there is nothing (yet) to read.
    """

    def __init__(self, check_interval_s: float = 10.0) -> None:
        # Minimum seconds between two full-ring dumps made to confirm a pending collective
        # (see _check_pending); each holds the GIL for up to ~30 ms with a full ring.
        self._check_interval_s = check_interval_s
        self._last_check = -math.inf
        self._lock = threading.Lock()
        self._pg_ref: weakref.ReferenceType[Any] | None = None  # default group last resolved
        self._dump: Callable[..., bytes] | None = None           # recorder that holds it
        self._dump_name = ""                                     # ...and its binding's name
        self._pg_key: str | None = None                          # its key in pg_status
        self._stale: dict[str, set[str]] = {}                    # dump name -> ids of dead groups
        self._scanned: dict[str, frozenset[str]] = {}            # dump name -> keys already scanned
        self._logged: set[str] = set()
        self._max_completed = -1                                 # completed never goes backwards
        self._last_pair: tuple[int, int] | None = None           # (enqueued, completed) last read
        self._checked: tuple[tuple[int, int], int] | None = None # pair -> completed from entries

    # -- public ---------------------------------------------------------------------------

    def read(self) -> dict[str, float] | None:
        with self._lock:
            try:
                return self._read()
            except Exception as e:  # never let telemetry take the heartbeat down
                self._debug_once(f"error:{type(e).__name__}",
                                 "collective progress unavailable: %s: %s", type(e).__name__, e)
                return None

    def status(self) -> tuple[int, int] | None:
        """(last enqueued, last completed) sequence numbers of the default group, without the lock.

        ~10 us (one status-only dump, independent of the ring's size): cheap enough for the
        training thread at every step exit, and never blocked behind ``read()``'s occasional full
        dump. ``completed`` is the raw field (gloo's can lag or step back, see _check_pending).
        None until ``read()`` has found which recorder holds the default group."""
        dump, key = self._dump, self._pg_key
        if dump is None or key is None:
            return None
        try:
            entry = (json.loads(dump(includeCollectives=False, onlyActive=True)).get("pg_status") or {}).get(key)
            if entry is None:
                return None
            return int(entry["last_enqueued_collective"]), int(entry["last_completed_collective"])
        except Exception as e:
            self._debug_once(f"status:{type(e).__name__}", "collective status unavailable: %s", e)
            return None

    # -- internals ------------------------------------------------------------------------

    def _debug_once(self, key: str, msg: str, *args: Any) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.debug(msg, *args)

    def _read(self) -> dict[str, float] | None:
        try:
            import torch.distributed as dist
            from torch.distributed import distributed_c10d
        except ImportError:
            self._debug_once("no-dist", "torch.distributed is not available")
            return None
        if not dist.is_available() or not dist.is_initialized():
            return None
        pg = distributed_c10d._get_default_group()

        if self._pg_ref is None or self._pg_ref() is not pg:
            if self._pg_ref is not None and self._dump is not None and self._pg_key is not None:
                # The default group was replaced: its old id must never be picked again.
                self._stale.setdefault(self._dump_name, set()).add(self._pg_key)
            self._pg_ref = weakref.ref(pg)
            self._dump = None
            self._pg_key = None
            self._scanned.clear()
            self._max_completed = -1
            self._last_pair = None
            self._checked = None
        if self._dump is None and not self._resolve(pg, dist):
            return None

        assert self._dump is not None and self._pg_key is not None
        status = json.loads(self._dump(includeCollectives=False, onlyActive=True)).get("pg_status") or {}
        entry = status.get(self._pg_key)
        if entry is None:
            return None
        enqueued = int(entry["last_enqueued_collective"])
        completed = min(max(int(entry["last_completed_collective"]), self._max_completed), enqueued)
        if completed < enqueued and self._dump_name == _GENERIC_DUMP:
            completed = self._check_pending(enqueued, completed)
        self._max_completed = completed
        return {ENQUEUED: float(enqueued), COMPLETED: float(completed)}

    def _check_pending(self, enqueued: int, completed: int) -> int:
        """Confirm an apparently pending collective against the entries' ``retired`` flags.

        gloo runs collectives on several worker threads, and each sets ``last_completed`` to
        the sequence number of the work *it* just retired, so the field can go backwards and
        stay one below ``last_enqueued`` after everything finished (seen in ~7 % of bursts of
        three back-to-back all_reduces, torch 2.13). The entries' ``retired`` flag is the truth,
        but reading it needs a dump of the whole ring (~30 ms for 2,000 entries, holding the
        GIL), so it is done only when the same (enqueued, completed) pair is seen on two
        consecutive reads - a state that persisted for a heartbeat - at most once per such
        state and at most once per ``check_interval_s``.
        """
        pair = (enqueued, completed)
        previous, self._last_pair = self._last_pair, pair
        if pair != previous:
            return completed
        if self._checked is not None and self._checked[0] == pair:
            return self._checked[1]
        now = time.monotonic()
        if now - self._last_check < self._check_interval_s:
            return completed  # checked recently; try again on a later read
        self._last_check = now
        assert self._dump is not None and self._pg_key is not None
        pg_id = int(self._pg_key)
        full = json.loads(self._dump(includeCollectives=True, onlyActive=False))
        unretired = [e.get("collective_seq_id", 0) for e in full.get("entries") or ()
                     if e.get("pg_id") == pg_id and not e.get("is_p2p") and not e.get("retired")
                     and 0 < e.get("collective_seq_id", 0) <= enqueued]
        verified = max(completed, min(unretired) - 1) if unretired else enqueued
        self._checked = (pair, verified)
        return verified

    def _candidates(self, dist: Any) -> list[tuple[str, Callable[..., bytes]]]:
        import torch._C._distributed_c10d as c10d_c

        try:
            backend = str(dist.get_backend()).lower()
        except Exception:
            backend = ""
        order = [_NCCL_DUMP, _GENERIC_DUMP] if "nccl" in backend else [_GENERIC_DUMP, _NCCL_DUMP]
        found = [(name, getattr(c10d_c, name)) for name in order if callable(getattr(c10d_c, name, None))]
        if not found:
            self._debug_once("no-api", "this torch has no flight-recorder JSON dump (%s)",
                             " or ".join(order))
        return found

    def _resolve(self, pg: Any, dist: Any) -> bool:
        """Find which recorder holds the default group and under which pg id; cache it."""
        name = str(getattr(pg, "group_name", "0"))
        for dump_name, dump in self._candidates(dist):
            light = json.loads(dump(includeCollectives=False, onlyActive=True))
            keys = frozenset((light.get("pg_status") or {}).keys())
            if not keys:
                self._debug_once(f"empty:{dump_name}",
                                 "%s: flight recorder has no process-group status yet (no "
                                 "collective issued, or TORCH_FR_BUFFER_SIZE=0)", dump_name)
                continue
            if self._scanned.get(dump_name) == keys:
                continue  # nothing new since the last scan of this recorder
            self._scanned[dump_name] = keys
            # A full dump, once: the entries map group names to pg ids. No stacks in JSON dumps.
            full = json.loads(dump(includeCollectives=True, onlyActive=False))
            stale = self._stale.get(dump_name, set())
            ids = {str(e.get("pg_id")) for e in full.get("entries") or ()
                   if (e.get("process_group") or [None])[0] == name}
            ids = {i for i in ids if i in keys and i not in stale}
            if ids:
                # Ids grow with each group this process creates: the newest one is the live group.
                self._pg_key = max(ids, key=int)
                self._dump = dump
                self._dump_name = dump_name
                log.debug("collective progress: default group %r is pg_id %s in %s",
                          name, self._pg_key, dump_name)
                return True
        return False


class ArrivalClock:
    """When this rank reached the last collective of each step, counted from its previous sync.

    Under synchronous collectives (DDP, FSDP, tensor and pipeline parallelism) every rank's wall
    ``step_time`` becomes the slowest rank's, so ``step_time`` cannot name it. What differs is the
    rank's own work between two synchronisations: ``collective_arrival`` is, per step, the seconds
    from the moment the rank saw the previous step's last collective complete (its sync) to the
    moment it enqueued this step's last collective (its arrival at the next one). Slowness before
    the collective (a slow forward) and after it (a slow optimizer step, checkpoint or loader)
    both land in it, the time spent waiting for others in neither. Across ranks the root's summary
    is exact and constant-size: ``argmax`` arrived last, and ``max - p50`` is how long the median
    rank waited for it. Both ends are read on the rank's own clock; hosts' clocks are never
    compared.

    Where the times come from (torch 2.13.0, gloo, measured): the recorder keeps each entry's
    ``time_created_ns``, but reading entries needs a full dump whose cost grows with the ring
    (20-80 ms for the default 2,000 entries on this machine, holding the GIL): too much per step.
    The status-only dump (``pg_status``: last enqueued and last completed sequence numbers) costs
    ~10 us whatever the ring holds. So a daemon thread polls it while a step is open, every
    ``period_s`` (1/``resolution`` of the last step, within [``min_period_s``, ``max_period_s``]:
    1/20 of a step in 10-100 ms; each poll takes the GIL from a training thread running Python, a
    hand-off of ~0.1 ms, so at most 100 polls a second keep that under 1 %; see
    bench/arrival_cost.py), noting when each number changed; at step exit the training thread reads it once more. The
    arrival is when the poller first saw the step's last sequence number enqueued (the exit, if it
    had not yet); the sync is when it was first seen completed (the exit, if not yet: gloo's
    completed field sometimes stays one behind, and then the step counts from its exit, which only
    hides work done after the collective). Errors are one period at most, late, on every rank
    alike. A step without a collective has no figure. With NCCL the host enqueues ahead of the GPU
    and completion is seen by the watchdog: not verified here (no GPU); see docs/torch.md.
    """

    def __init__(self, progress: CollectiveProgress, resolution: int = 20, min_period_s: float = 0.01,
                 max_period_s: float = 0.1) -> None:
        self.progress = progress
        self.resolution = resolution
        self.min_period_s = min_period_s
        self.max_period_s = max_period_s
        self.period_s = max_period_s
        self.polls = 0
        # Written by the poller only, read by the training thread (tuple assignment is atomic):
        self._enqueued: tuple[int, int] = (-1, 0)    # (sequence number, first seen, time_ns)
        self._completed: tuple[int, int] = (-1, 0)   # (highest sequence number seen completed, first seen)
        self._open = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._exit_seq: int | None = None            # last enqueued at the previous step's exit
        self._sync_ns = 0                            # when the previous step's last collective completed
        self._entered = 0.0

    def begin(self, entry_ns: int) -> int:
        """Training thread, at step entry: start polling; returns the ``time_ns`` to count from."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._poll, name="telemetry-arrivals", daemon=True)
            self._thread.start()
        if self._exit_seq is None:
            status = self.progress.status()
            self._exit_seq = status[0] if status is not None else None
        self._entered = time.perf_counter()
        self._open.set()
        return self._sync_ns or entry_ns

    def end(self, exit_ns: int) -> int | None:
        """Training thread, at step exit: when (``time_ns``) this rank enqueued the step's last
        collective, or None when the step issued none (or the recorder cannot be read)."""
        self._open.clear()
        took = time.perf_counter() - self._entered
        self.period_s = min(self.max_period_s, max(self.min_period_s, took / self.resolution))
        status = self.progress.status()
        before = self._exit_seq
        self._exit_seq = status[0] if status is not None else None
        if status is None or before is None or status[0] <= before:
            self._sync_ns = 0
            return None
        last, completed = status
        seq, seen_ns = self._enqueued
        done, done_ns = self._completed
        self._sync_ns = done_ns if done >= last else exit_ns
        return seen_ns if seq == last and seen_ns <= exit_ns else exit_ns

    def close(self) -> None:
        self._stop = True
        self._open.set()

    def _poll(self) -> None:
        progress = self.progress
        while True:
            self._open.wait()
            if self._stop:
                return
            status = progress.status()
            if status is None:
                progress.read()  # finds the recorder holding the default group (once)
            else:
                now = time.time_ns()
                if status[0] != self._enqueued[0]:
                    self._enqueued = (status[0], now)
                if status[1] > self._completed[0]:
                    self._completed = (status[1], now)
            self.polls += 1
            time.sleep(self.period_s)
