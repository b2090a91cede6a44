"""The default process group's flight-recorder entries: a JSON-safe dump, and collective fingerprints.

Two readers of one full dump of the recorder that :class:`~telemetry.torch.collective.CollectiveProgress`
found holding the default process group:

* :func:`default_group_dump` - the group's newest entries, for a capture (issue 13, item 1).
* :class:`Fingerprinter` - per collective sequence number, a 64-bit hash of what this rank enqueued
  (:func:`fingerprint`), for the heartbeat (``Heartbeat.fingerprints``). The tree merges them per
  sequence number into the smallest and the largest hash with their ranks
  (collectors/common/fingerprints.py); the root raises ``collective_mismatch`` when they differ
  (collectors/detectors/collective_mismatch.py). See docs/forensics.md, "Collective fingerprints".

The dump used is the pickle one (``_dump_fr_trace`` for the generic recorder, ``_dump_nccl_trace`` for
NCCL's; ``includeStackTraces=False``): about half the cost of the JSON one (torch 2.13, gloo, a full
2,000-entry ring: 8 ms + ``pickle.loads`` against 17 ms). The bytes come from torch's own recorder in this
process, never from outside, so ``pickle.loads`` is safe here.

Cost, measured on this machine (torch 2.13.0 CPU wheel, gloo, 1 process, the recorder's default
2,000-entry ring full, 2 cores shared with other work; tests/test_fingerprints.py::test_take_cost_with_a_full_ring
prints it): a ``take()`` that dumps costs 12.5-39 ms (median of 15 in each of 5 runs; single takes up to
~230 ms while the machine was loaded), nearly all of it the dump and ``pickle.loads`` (hashing the at most
64 sampled entries is ~0.3 ms); a ``take()`` that does not dump costs ~7 us (one status-only
dump). The first take after the group's first collectives also resolves the recorder
(``CollectiveProgress.read``, one JSON dump) unless the heartbeat's ``read()`` already did: 48-235 ms once.
With the defaults a dump happens at most every ``max(min_interval_s, last dump's cost / cpu_budget)``
seconds - every 3-11 s with a full ring here (15-55 ms / 0.005) - and only when the default group enqueued
a collective since the last one: at most 0.5 % of one core, on the SDK's heartbeat thread (the dump holds
the GIL while it copies the ring).

Nothing here issues a collective, and nothing raises: any failure returns None / ``[]`` and is logged
once at debug level.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import pickle
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from telemetry.names import MAX_WHAT
from telemetry.torch.collective import CollectiveProgress

__all__ = ["Fingerprinter", "MAX_WHAT", "default_group_dump", "fingerprint", "sample_seqs"]

log = logging.getLogger(__name__)

# The JSON dump CollectiveProgress resolved -> the pickle dump of the same recorder.
_PICKLE_DUMPS = {"_dump_fr_trace_json": "_dump_fr_trace", "_dump_nccl_trace_json": "_dump_nccl_trace"}
_KEPT_KEYS = ("version", "comm_lib_version")

_logged: set[str] = set()
_logged_lock = threading.Lock()


def _debug_once(key: str, msg: str, *args: Any) -> None:
    with _logged_lock:
        if key in _logged:
            return
        _logged.add(key)
    log.debug(msg, *args)


# -- the dump ------------------------------------------------------------------------------------


def _resolved(progress: CollectiveProgress) -> tuple[str, str] | None:
    """(pickle dump name, pg key) of the recorder holding the default group, resolving it if needed."""
    if progress._dump is None or progress._pg_key is None:
        progress.read()  # never raises; finds the recorder and the group's key once collectives exist
    with progress._lock:  # a consistent pair, never one half of a re-resolution
        name, key = progress._dump_name, progress._pg_key
        if progress._dump is None:
            return None
    if key is None or name not in _PICKLE_DUMPS:
        return None
    return _PICKLE_DUMPS[name], key


def _full_dump(progress: CollectiveProgress) -> tuple[dict[str, Any], str, list[dict[str, Any]]] | None:
    """(the whole dump, the default group's key, its entries oldest first), or None."""
    resolved = _resolved(progress)
    if resolved is None:
        return None
    name, key = resolved
    import torch._C._distributed_c10d as c10d_c

    dump = getattr(c10d_c, name, None)
    if not callable(dump):
        _debug_once(f"no-api:{name}", "this torch has no %s", name)
        return None
    data = pickle.loads(dump(includeCollectives=True, includeStackTraces=False, onlyActive=False))
    if not isinstance(data, dict):
        return None
    pg_id = int(key)
    entries = [e for e in data.get("entries") or () if isinstance(e, dict) and e.get("pg_id") == pg_id]
    entries.sort(key=lambda e: e.get("record_id", 0))
    return data, key, entries


def _jsonable(value: Any) -> Any:
    """A JSON-safe copy: tuples become lists, keys strings, non-finite floats None, anything else str."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def default_group_dump(progress: CollectiveProgress, last: int = 200) -> dict[str, Any] | None:
    """The flight recorder's dump of the default process group, JSON-safe: ``{"version",
    "comm_lib_version" (when the dump has it), "pg_config", "pg_status", "entries"}`` with ``entries``
    the group's newest ``last`` entries (collectives and p2p, oldest first, no stack traces),
    ``pg_status`` only the default group's, and ``pg_config`` only the default group's when it is
    listed under its name (torch 2.13 with gloo lists one entry under "": then that is kept as is).

    One full dump of the recorder (cost: see the module docstring). None when torch.distributed is not
    initialised, the recorder is off or holds no collective of the default group yet, or on any error
    (logged once at debug level); never raises."""
    try:
        found = _full_dump(progress)
        if found is None:
            return None
        data, key, entries = found
        out: dict[str, Any] = {k: _jsonable(data[k]) for k in _KEPT_KEYS if k in data}
        names = {str((e.get("process_group") or ("",))[0]) for e in entries}
        config = data.get("pg_config") or {}
        if isinstance(config, dict):
            mine = {k: v for k, v in config.items() if str(k) in names}
            config = mine or config
        out["pg_config"] = _jsonable(config)
        status = data.get("pg_status") or {}
        out["pg_status"] = _jsonable({key: status[key]} if isinstance(status, dict) and key in status else {})
        out["entries"] = _jsonable(entries[-last:] if last > 0 else [])
        return out
    except Exception as e:  # never let a capture take the rank down
        _debug_once(f"dump:{type(e).__name__}", "flight-recorder dump unavailable: %s: %s", type(e).__name__, e)
        return None


# -- fingerprints --------------------------------------------------------------------------------


def _op(entry: dict[str, Any]) -> str:
    name = str(entry.get("profiling_name") or "?")
    return name.split(":", 1)[1] if ":" in name else name  # "gloo:all_reduce" -> "all_reduce"


def _tensors(sizes: Any, dtypes: Any) -> list[str]:
    sizes, dtypes = list(sizes or ()), list(dtypes or ())
    out = []
    for i in range(max(len(sizes), len(dtypes))):
        shape = sizes[i] if i < len(sizes) else "?"
        dtype = dtypes[i] if i < len(dtypes) else "?"
        dims = ",".join(str(d) for d in shape) if isinstance(shape, (list, tuple)) else str(shape)
        out.append(f"{dtype}[{dims}]")
    return out


def fingerprint(entry: dict[str, Any]) -> tuple[int, str]:
    """(hash, what) of one flight-recorder entry: what the collective was, not when or how it went.

    The identity is the op (``profiling_name`` without its backend prefix, so gloo and NCCL ranks of one
    job would agree), the input and output sizes and dtypes, the process group (name and description)
    and ``is_p2p``; never the sequence number, times, state or ids. ``hash`` is the first 8 bytes of
    BLAKE2b over a canonical JSON of that identity, as an unsigned 64-bit integer: equal on every rank and
    in every process for the same collective (Python's ``hash()`` is salted per process). ``what`` is
    the readable form, e.g. ``"all_reduce in=Float[4] out=Float[4] pg=default_pg"``, cut to 200
    characters (the hash covers the whole identity, so two collectives that differ past the cut still
    hash apart)."""
    op = _op(entry)
    ins = _tensors(entry.get("input_sizes"), entry.get("input_dtypes"))
    outs = _tensors(entry.get("output_sizes"), entry.get("output_dtypes"))
    group = entry.get("process_group") or ("", "")
    group = list(group) if isinstance(group, (list, tuple)) else [str(group)]
    pg_name = str(group[0]) if group else ""
    pg_desc = str(group[1]) if len(group) > 1 else ""
    p2p = bool(entry.get("is_p2p"))
    identity = json.dumps([op, ins, outs, pg_name, pg_desc, p2p], separators=(",", ":"))
    digest = int.from_bytes(hashlib.blake2b(identity.encode(), digest_size=8).digest(), "big")
    parts = [op]
    if ins:
        parts.append("in=" + ",".join(ins))
    if outs:
        parts.append("out=" + ",".join(outs))
    parts.append(f"pg={pg_desc or pg_name}")
    if p2p:
        parts.append("p2p")
    what = " ".join(parts)
    if len(what) > MAX_WHAT:
        what = what[: MAX_WHAT - 3] + "..."
    return digest, what


def sample_seqs(seqs: Iterable[int], limit: int) -> list[int]:
    """At most `limit` of `seqs`, chosen so that ranks holding different but overlapping sets choose alike.

    The rule: all of them when they fit; else the multiples of the smallest power of two 2**k (k >= 1) of
    which at most `limit` are in the set. Multiples of a larger power of two are a subset of those of a
    smaller one, so two ranks that sampled with different strides still share every seq the larger
    stride chose. When no multiple of that stride is in the set (a sparse set and a tiny limit), the
    newest `limit` multiples of half of it. Sorted, ascending."""
    ordered = sorted(set(seqs))
    if limit <= 0:
        return []
    if len(ordered) <= limit:
        return ordered
    stride = 2
    previous = ordered
    while True:
        chosen = [s for s in ordered if s % stride == 0]
        if len(chosen) <= limit:
            return chosen if chosen else previous[-limit:]
        previous, stride = chosen, stride * 2


class Fingerprinter:
    """Fingerprints of the default group's collectives that this rank enqueued, for the heartbeat.

    ``take()`` (the SDK's heartbeat thread calls it every second) returns the fingerprints of the
    collectives (not p2p) with a sequence number above the last one it returned, at most
    ``max_per_take`` of them (chosen by :func:`sample_seqs` when more are new, so that every rank tends
    to send the same sequence numbers). It dumps the recorder only when the status-only read
    (``CollectiveProgress.status``, ~10 us) shows ``last_enqueued`` moved since the last dump, no more
    often than ``min_interval_s``, and then not again until the last dump's cost (``perf_counter``
    around the dump and the fingerprinting) divided by ``cpu_budget`` has passed: dump time / wall time
    stays under ``cpu_budget``. When a take finds nothing enqueued since the last dump (a stall, or a
    job with fewer collectives than one per ``min_interval_s``) and at least ``min_interval_s`` has passed
    since it, it sends, once and without a dump, the newest ``max_per_take`` seqs of that dump that the
    sampling left out: a hang's last collectives reach the root from every rank even at high collective
    rates. A new default group (``destroy_process_group`` then
    ``init_process_group``) starts over from its sequence number 1.

    Issues no collective, never raises (returns ``[]`` and logs once at debug level), thread-safe.
    Returns ``[]`` when torch.distributed is not initialised or the recorder is off
    (``TORCH_FR_BUFFER_SIZE=0``).
    """

    def __init__(self, progress: CollectiveProgress, min_interval_s: float = 2.0, max_per_take: int = 64,
                 cpu_budget: float = 0.005, clock: Callable[[], float] = time.monotonic) -> None:
        if max_per_take < 1:
            raise ValueError(f"max_per_take must be at least 1, got {max_per_take}")
        if not cpu_budget > 0:
            raise ValueError(f"cpu_budget must be above 0, got {cpu_budget}")
        self.progress = progress
        self.min_interval_s = float(min_interval_s)
        self.max_per_take = int(max_per_take)
        self.cpu_budget = float(cpu_budget)
        self._clock = clock
        self._lock = threading.Lock()
        self._group: tuple[str, str] | None = None  # (recorder, pg key) the state below belongs to
        self._last_seq = 0            # the highest seq seen in a dump (returned, or sampled out)
        self._dumped_enqueued = -1    # last_enqueued when the last dump was taken
        self._next_dump = -math.inf   # clock() before which no dump is taken
        self._next_resolve = -math.inf
        self._tail: list[tuple[int, dict[str, Any]]] = []  # newest seqs the last dump's sampling left out
        self._tail_due = -math.inf
        # Counters, for benchmarks and tests.
        self.dumps = 0
        self.dump_seconds = 0.0
        self.last_dump_seconds = 0.0

    def newest(self, n: int, wait_s: float = 0.25) -> list[Any]:
        """The fingerprints of the newest `n` collectives in a fresh dump, whatever was sent before (a rank's last
        words: the collectives it issued right before it died). Never raises; [] when there is no recorder, or when
        the lock is not free within `wait_s` (the thread that holds it may be the one this runs on, interrupted)."""
        if not self._lock.acquire(timeout=wait_s):
            return []
        try:
            found = _full_dump(self.progress)
            if found is None:
                return []
            seqs = {e["collective_seq_id"]: e for e in found[2]
                    if not e.get("is_p2p") and isinstance(e.get("collective_seq_id"), int)}
            return [self._proto(seq, seqs[seq]) for seq in sorted(seqs)[-n:]]
        except Exception as e:
            _debug_once(f"newest:{type(e).__name__}", "collective fingerprints unavailable: %s: %s",
                        type(e).__name__, e)
            return []
        finally:
            self._lock.release()

    def take(self) -> list[Any]:
        """New fingerprints (``telemetry.v1.forensics_pb2.CollectiveFingerprint``), oldest first; often []."""
        try:
            with self._lock:
                return self._take()
        except Exception as e:  # never let telemetry take the heartbeat down
            _debug_once(f"take:{type(e).__name__}", "collective fingerprints unavailable: %s: %s",
                        type(e).__name__, e)
            return []

    def _take(self) -> list[Any]:
        progress = self.progress
        now = self._clock()
        if progress._dump is None or progress._pg_key is None:
            if now < self._next_resolve:
                return []
            self._next_resolve = now + self.min_interval_s
            progress.read()
        with progress._lock:
            named = (progress._dump_name, progress._pg_key) if progress._dump is not None else None
        if named is None or named[1] is None:
            return []
        group = (named[0], named[1])
        if group != self._group:
            self._group, self._last_seq, self._dumped_enqueued = group, 0, -1
            self._tail = []
        status = progress.status()
        if status is None:
            return []
        enqueued = status[0]
        if enqueued < self._dumped_enqueued:  # went backwards: not the same group's sequence any more
            self._last_seq, self._dumped_enqueued, self._tail = 0, -1, []
        if enqueued == self._dumped_enqueued or enqueued <= self._last_seq:
            # Nothing enqueued since the last dump: stalled (or slow). Send the newest seqs that the
            # sampling left out, once, so that a hang's last collectives are compared on every rank.
            if self._tail and now >= self._tail_due:
                tail, self._tail = self._tail, []
                return [self._proto(seq, entry) for seq, entry in tail]
            return []
        if now < self._next_dump:
            return []

        start = time.perf_counter()
        found = _full_dump(progress)
        if found is None:
            self._next_dump = now + self.min_interval_s
            return []
        _, key, entries = found
        if key != group[1]:
            return []  # re-resolved between the status read and the dump: start over next time
        new = {}
        for e in entries:
            if e.get("is_p2p"):
                continue
            seq = e.get("collective_seq_id")
            if isinstance(seq, int) and seq > self._last_seq:
                new[seq] = e
        chosen = sample_seqs(new, self.max_per_take)
        out = [self._proto(seq, new[seq]) for seq in chosen]
        picked = set(chosen)
        self._tail = [(seq, new[seq]) for seq in sorted(new)[-self.max_per_take:] if seq not in picked]
        self._tail_due = now + self.min_interval_s
        if new:
            self._last_seq = max(new)
        self._dumped_enqueued = enqueued
        cost = time.perf_counter() - start
        self.dumps += 1
        self.dump_seconds += cost
        self.last_dump_seconds = cost
        self._next_dump = now + max(self.min_interval_s, cost / self.cpu_budget)
        return out

    @staticmethod
    def _proto(seq: int, entry: dict[str, Any]) -> Any:
        from telemetry.v1 import forensics_pb2

        digest, what = fingerprint(entry)
        return forensics_pb2.CollectiveFingerprint(seq=seq, hash=digest, what=what)
