"""Collective fingerprints merged up the tree without growing with N (issue 13 item 2, docs/forensics.md).

Each rank's heartbeat carries ``CollectiveFingerprint{seq, hash, what}`` for some of the collectives it
enqueued in its default process group (telemetry/torch/flight_recorder.py). Per (job, attempt, seq) a
tier keeps only the smallest and the largest hash it has seen, each with the bitmap of the ranks that sent
it and its readable ``what`` (``MergedFingerprint``). The merge rule:

* min_hash = the smaller of the two sides' min_hash; its ranks = the union of the ranks of every side whose
  hash equals it (so equal hashes union their ranks); likewise for max_hash;
* a hash strictly between min and max is dropped (a third distinct fingerprint is not seen);
* equal hashes with different ``what`` keep the lexicographically smaller ``what`` (a 64-bit collision,
  or a lie: either way the choice does not depend on arrival order).

The merged value is a function of the *set* of (rank, hash, what) reports, so merging is idempotent,
commutative and associative (tests/test_fingerprints.py proves it with hypothesis): a resent or
duplicated unit changes nothing, and subtrees can be merged in any order and grouping.

Per attempt of a job only the newest ``max_seqs_per_job`` sequence numbers are kept (a report older than all
of them when the table is full is ignored; the retained set is the newest of everything seen, whatever the
order, so the merge stays order-independent). Each attempt is kept apart, as every tier keeps attempts apart
(collectors/common/attempts.py): a new attempt's reports, a restart's or a rogue process's with a number of its
own (issue 26 item 2), never replace the running attempt's. At most ``max_jobs`` (job, attempt) entries are
kept: a new one beyond that evicts the one least recently updated (``evicted_jobs`` counts them). ``what`` strings
are interned, so the same collective at many sequence numbers and jobs is stored once.

Input is checked before anything is changed, and refused with a ValueError that says why (the job name,
a rank at or above ``max_rank`` (2**24), a seq above 2**53, a ``what`` over 200 characters, a hash outside
64 bits, a malformed or empty ranks bitmap, min_hash > max_hash). Thread-safe. No torch here.
"""

from __future__ import annotations

import heapq
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from pyroaring import BitMap

from collectors.common.validation import MAX_INDEX, check_job
from telemetry.names import MAX_WHAT
from telemetry.v1 import forensics_pb2

__all__ = ["FingerprintTable", "MAX_RANK", "MAX_WHAT", "minority", "ranks_of"]

MAX_RANK = 1 << 24   # ranks are below this
MAX_HASH = 1 << 64


class _Merged:
    """One seq's merged value. When lo_hash == hi_hash, hi_ranks IS lo_ranks (one object) and the whats
    are equal: the two sides are one."""

    __slots__ = ("lo_hash", "lo_what", "lo_ranks", "hi_hash", "hi_what", "hi_ranks")

    def __init__(self, h: int, what: str, ranks: BitMap) -> None:
        self.lo_hash = self.hi_hash = h
        self.lo_what = self.hi_what = what
        self.lo_ranks = self.hi_ranks = ranks

    def absorb(self, h: int, what: str, ranks: BitMap) -> bool:
        """Merge one side (hash, what, ranks) in; returns whether anything changed. `ranks` may be kept."""
        if h < self.lo_hash:
            self.lo_hash, self.lo_what, self.lo_ranks = h, what, ranks  # the old lo stays as hi if it was
            return True
        if h > self.hi_hash:
            self.hi_hash, self.hi_what, self.hi_ranks = h, what, ranks
            return True
        changed = False
        if h == self.lo_hash:
            if not ranks <= self.lo_ranks:
                self.lo_ranks |= ranks  # also hi's when the sides are one
                changed = True
            if what < self.lo_what:
                self.lo_what = what
                changed = True
            if self.hi_hash == h:
                self.hi_what = self.lo_what
        elif h == self.hi_hash:
            if not ranks <= self.hi_ranks:
                self.hi_ranks |= ranks
                changed = True
            if what < self.hi_what:
                self.hi_what = what
                changed = True
        return changed  # strictly between lo and hi: not kept

    def to_proto(self, seq: int, optimize: bool = False) -> forensics_pb2.MergedFingerprint:
        if optimize:
            self.lo_ranks.run_optimize()
            if self.hi_ranks is not self.lo_ranks:
                self.hi_ranks.run_optimize()
        lo = self.lo_ranks.serialize()
        hi = lo if self.hi_ranks is self.lo_ranks else self.hi_ranks.serialize()
        return forensics_pb2.MergedFingerprint(seq=seq, min_hash=self.lo_hash, min_what=self.lo_what, min_ranks=lo,
                                               max_hash=self.hi_hash, max_what=self.hi_what, max_ranks=hi)


@dataclass
class _Job:
    attempt: int
    seqs: dict[int, _Merged] = field(default_factory=dict)
    heap: list[int] = field(default_factory=list)     # the keys of `seqs`, for evicting the oldest
    dirty: set[int] = field(default_factory=set)      # changed since the last drain


def ranks_of(data: bytes, what: str = "ranks", max_rank: int = MAX_RANK) -> BitMap:
    """A portable roaring bitmap of ranks from the wire, checked: non-empty, every rank below max_rank."""
    if not data:
        raise ValueError(f"{what}: empty bitmap (every side of a merged fingerprint has at least one rank)")
    try:
        bitmap = BitMap.deserialize(bytes(data))
    except Exception as exc:  # pyroaring raises ValueError or its own errors on corrupt input
        raise ValueError(f"{what} is not a portable roaring bitmap ({exc})") from None
    if not bitmap:
        raise ValueError(f"{what}: empty bitmap (every side of a merged fingerprint has at least one rank)")
    if bitmap.max() >= max_rank:
        raise ValueError(f"{what}: rank {bitmap.max()} is at or above the limit of {max_rank}")
    return bitmap


def minority(lo_count: int, hi_count: int) -> str:
    """Which side of a mismatch is the minority: "min", "max", or "tie" (equal counts: name both)."""
    return "min" if lo_count < hi_count else "max" if hi_count < lo_count else "tie"


def _check_what(what: str, where: str) -> str:
    if len(what) > MAX_WHAT:
        raise ValueError(f"{where}: what is {len(what)} characters, over the limit of {MAX_WHAT}")
    return sys.intern(what)


def _check_seq(seq: int, where: str) -> None:
    if not 0 <= seq <= MAX_INDEX:
        raise ValueError(f"{where}: seq {seq} is outside [0, 2**53]")


def _check_hash(h: int, where: str) -> None:
    if not 0 <= h < MAX_HASH:
        raise ValueError(f"{where}: hash {h} is not an unsigned 64-bit integer")


class FingerprintTable:
    """Merged collective fingerprints per job, for one tier (agent, collector or root).

    * ``add(job, attempt, rank, fps)``: a rank's heartbeat (at the agent). Returns how many seqs changed.
    * ``merge(msg)``: a child's ``JobFingerprints``. Returns the changed seqs' merged values (what the root
      hands to the collective-mismatch detector).
    * ``drain(limit=None)``: what changed since the last drain, one ``JobFingerprints`` per job (for the
      unit to the parent); bitmaps run-optimised. With ``limit``, at most that many seqs in all: the rest
      stay for the next drain.
    * ``get(job, attempt)`` / ``mismatches(job, attempt)``: every kept seq / those where min_hash != max_hash,
      ascending.
    * ``forget(job, attempt)``: the attempt finished.
    """

    def __init__(self, max_seqs_per_job: int = 512, max_jobs: int = 1024, max_rank: int = MAX_RANK) -> None:
        if max_seqs_per_job < 1 or max_jobs < 1 or max_rank < 1:
            raise ValueError("max_seqs_per_job, max_jobs and max_rank must be at least 1")
        self.max_seqs_per_job = max_seqs_per_job
        self.max_jobs = max_jobs
        self.max_rank = max_rank
        self.evicted_jobs = 0
        self.ignored_stale = 0  # reports older than every kept seq of a full job
        # by (job, attempt), least recently updated first
        self._jobs: OrderedDict[tuple[str, int], _Job] = OrderedDict()
        self._lock = threading.Lock()

    # -- input -----------------------------------------------------------------------------------

    def add(self, job: str, attempt: int, rank: int,
            fps: Iterable[forensics_pb2.CollectiveFingerprint]) -> int:
        fps = list(fps)
        check_job(job)
        if not 0 <= attempt < MAX_HASH:
            raise ValueError(f"job {job!r}: attempt {attempt} is not an unsigned 64-bit integer")
        if not 0 <= rank < self.max_rank:
            raise ValueError(f"job {job!r}: rank {rank} is outside [0, {self.max_rank})")
        items = []
        for fp in fps:
            where = f"job {job!r} rank {rank} seq {fp.seq}"
            _check_seq(fp.seq, where)
            _check_hash(fp.hash, where)
            items.append((fp.seq, fp.hash, _check_what(fp.what, where)))
        if not items:
            return 0
        with self._lock:
            state = self._job(job, attempt)
            changed = 0
            for seq, h, what in items:
                changed += self._absorb(state, seq, ((h, what, BitMap([rank])),))
            return changed

    def merge(self, msg: forensics_pb2.JobFingerprints) -> list[forensics_pb2.MergedFingerprint]:
        job, attempt = msg.job, msg.attempt
        check_job(job)
        items = []
        for m in msg.seqs:
            where = f"job {job!r} seq {m.seq}"
            _check_seq(m.seq, where)
            if m.min_hash > m.max_hash:
                raise ValueError(f"{where}: min_hash {m.min_hash:#x} is above max_hash {m.max_hash:#x}")
            lo = (m.min_hash, _check_what(m.min_what, where), ranks_of(m.min_ranks, f"{where} min_ranks",
                                                                       self.max_rank))
            hi = (m.max_hash, _check_what(m.max_what, where), ranks_of(m.max_ranks, f"{where} max_ranks",
                                                                       self.max_rank))
            items.append((m.seq, (lo, hi)))
        if not items:
            return []
        with self._lock:
            state = self._job(job, attempt)
            changed: set[int] = set()
            for seq, sides in items:
                if self._absorb(state, seq, sides):
                    changed.add(seq)
            return [state.seqs[s].to_proto(s) for s in sorted(changed) if s in state.seqs]

    # -- output ----------------------------------------------------------------------------------

    def drain(self, limit: int | None = None) -> list[forensics_pb2.JobFingerprints]:
        out = []
        budget = limit if limit is not None else -1
        with self._lock:
            for (job, _), state in self._jobs.items():
                if not state.dirty or budget == 0:
                    continue
                seqs = sorted(state.dirty)
                if budget > 0:
                    seqs = seqs[:budget]
                    budget -= len(seqs)
                state.dirty.difference_update(seqs)
                out.append(forensics_pb2.JobFingerprints(
                    job=job, attempt=state.attempt, seqs=[state.seqs[s].to_proto(s, optimize=True) for s in seqs]))
        return out

    def get(self, job: str, attempt: int = 0) -> list[forensics_pb2.MergedFingerprint]:
        with self._lock:
            state = self._jobs.get((job, attempt))
            return [] if state is None else [state.seqs[s].to_proto(s) for s in sorted(state.seqs)]

    def mismatches(self, job: str, attempt: int = 0) -> list[forensics_pb2.MergedFingerprint]:
        with self._lock:
            state = self._jobs.get((job, attempt))
            if state is None:
                return []
            return [state.seqs[s].to_proto(s) for s in sorted(state.seqs)
                    if state.seqs[s].lo_hash != state.seqs[s].hi_hash]

    def jobs(self) -> list[tuple[str, int]]:
        """The (job, attempt) entries kept."""
        with self._lock:
            return list(self._jobs)

    def forget(self, job: str, attempt: int = 0) -> None:
        with self._lock:
            self._jobs.pop((job, attempt), None)

    # -- internals (under the lock) --------------------------------------------------------------

    def _job(self, job: str, attempt: int) -> _Job:
        key = (job, attempt)
        state = self._jobs.get(key)
        if state is None:
            while len(self._jobs) >= self.max_jobs:
                self._jobs.popitem(last=False)
                self.evicted_jobs += 1
            state = self._jobs[key] = _Job(attempt)
        self._jobs.move_to_end(key)
        return state

    def _absorb(self, state: _Job, seq: int, sides: Iterable[tuple[int, str, BitMap]]) -> bool:
        merged = state.seqs.get(seq)
        if merged is None:
            if len(state.seqs) >= self.max_seqs_per_job and seq < state.heap[0]:
                self.ignored_stale += 1
                return False
            first, *rest = sides
            merged = state.seqs[seq] = _Merged(*first)
            for side in rest:
                merged.absorb(*side)
            heapq.heappush(state.heap, seq)
            while len(state.seqs) > self.max_seqs_per_job:
                old = heapq.heappop(state.heap)
                del state.seqs[old]
                state.dirty.discard(old)
            if seq in state.seqs:
                state.dirty.add(seq)
                return True
            return False
        changed = False
        for side in sides:
            changed |= merged.absorb(*side)
        if changed:
            state.dirty.add(seq)
        return changed
