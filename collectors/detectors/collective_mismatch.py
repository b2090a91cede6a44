"""Collective mismatch: ranks that enqueued different collectives at one sequence number of the default group.

Fed at the root with every merged fingerprint update (``observe(job, merged)``: the
``MergedFingerprint`` values that ``FingerprintTable.merge`` reports changed; collectors/common/
fingerprints.py). A seq whose min_hash != max_hash means at least two ranks issued different collectives
there (different op, sizes, dtypes or group): gloo then returns garbage without an error and the job
usually hangs a little later; NCCL may hang or corrupt. See docs/forensics.md, "Collective fingerprints".

One event per job (kind ``collective_mismatch``, key ""), opened at the first mismatching seq and updated
as more seqs mismatch or as more ranks' reports reach a seq:

* ranks: the minority of each mismatching seq kept (the side with fewer ranks; a tie names both sides),
  united over the seqs, at most 64 (EventLog's cap); hosts from the context.
* detail: ``seq`` (= ``first_seq``, the lowest mismatching seq: where the ranks diverged) with both
  fingerprints readable (``min``/``max``: hash in hex, ``what``, rank count, first ranks), ``majority``
  ("min", "max" or "tie"), ``minority_ranks``; ``last_seq`` and ``latest`` (the same for the highest
  mismatching seq, when it is another), ``mismatched_seqs`` (how many distinct seqs mismatched) and a
  one-line ``summary``.

Merging only widens a seq's [min, max], so a mismatch never heals: by default (``close_after_s`` = 0) the
event stays open until the job finishes (the root's ``EventLog.close_job``) or the detector forgets the
job. With ``close_after_s`` > 0, ``check()`` closes it once that many seconds passed without a new
mismatching seq (for a job known to survive its mismatches).

Limits: only the smallest and largest hash per seq travel up the tree, so a third distinct collective
(between them) is not seen, and its ranks are on neither side; only the seqs the ranks sampled are
compared (at most 64 per heartbeat each, see telemetry/torch/flight_recorder.py).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from collectors.common.fingerprints import minority, ranks_of
from collectors.common.rows import Row
from collectors.detectors.base import Detector
from collectors.detectors.events import MAX_LISTED_RANKS


@dataclass
class CollectiveMismatchConfig:
    enabled: bool = True
    severity: str = "critical"
    top: int = 8                 # ranks listed per side in the detail
    max_tracked_seqs: int = 256  # mismatching seqs remembered per job (the first one is always kept)
    close_after_s: float = 0.0   # 0: open until the job finishes; else close after this long without a new one


@dataclass
class _Side:
    hash: int
    what: str
    count: int
    first: list[int]

    def detail(self) -> dict:
        return {"hash": f"{self.hash:016x}", "what": self.what, "ranks": self.count, "first_ranks": self.first}


@dataclass
class _Seq:
    seq: int
    lo: _Side
    hi: _Side
    majority: str             # "min" | "max" | "tie"
    minority_ranks: list[int]

    def detail(self) -> dict:
        return {"seq": self.seq, "min": self.lo.detail(), "max": self.hi.detail(), "majority": self.majority,
                "minority_ranks": self.minority_ranks}


@dataclass
class _Job:
    seqs: OrderedDict[int, _Seq] = field(default_factory=OrderedDict)  # by first sight
    first: int | None = None
    last: int | None = None
    count: int = 0
    last_new: float = 0.0


def _side(h: int, what: str, data: bytes, top: int, name: str) -> tuple[_Side, list[int]]:
    ranks = ranks_of(data, name)
    listed = []
    for r in ranks:  # ascending; stop early on big bitmaps
        listed.append(r)
        if len(listed) >= MAX_LISTED_RANKS:
            break
    return _Side(h, what, len(ranks), listed[:top]), listed


def _ranks_text(side: _Side) -> str:
    shown = ", ".join(map(str, side.first))
    more = "" if side.count <= len(side.first) else f", ... ({side.count} ranks)"
    return f"rank{'s' if side.count != 1 else ''} {shown}{more}"


class CollectiveMismatchDetector(Detector):
    kind = "collective_mismatch"

    def __init__(self, events, context=None, config: CollectiveMismatchConfig | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(events, context)
        self.config = config or CollectiveMismatchConfig()
        self.clock = clock
        self._jobs: dict[str, _Job] = {}

    def wants(self, row: Row) -> bool:
        return False  # fed merged fingerprints (observe_fingerprints(job, merged)), never windows

    def observe_fingerprints(self, job: str, merged: Iterable) -> None:
        """Judge a job's merged fingerprint updates (``MergedFingerprint``; agreeing seqs cost a compare)."""
        if not self.config.enabled:
            return
        found = []
        world = self.context.world_of(job)
        for m in merged:
            if m.min_hash == m.max_hash:
                continue
            judged = self._judge(m)
            if self._decided(judged, world):
                found.append(judged)
        if not found:
            return
        state = self._jobs.setdefault(job, _Job())
        for info in found:
            if info.seq not in state.seqs:
                state.count += 1
                state.last_new = self.clock()
            state.seqs[info.seq] = info
            state.first = info.seq if state.first is None else min(state.first, info.seq)
            state.last = info.seq if state.last is None else max(state.last, info.seq)
        while len(state.seqs) > max(1, self.config.max_tracked_seqs):
            victim = next((s for s in state.seqs if s != state.first), None)
            if victim is None:
                break
            del state.seqs[victim]
        self._raise(job, state)

    def check(self, now: float | None = None) -> None:
        """Close the events of jobs without a new mismatching seq for ``close_after_s`` (when it is > 0)."""
        after = self.config.close_after_s
        if after <= 0:
            return
        now = self.clock() if now is None else now
        for job, state in list(self._jobs.items()):
            if now - state.last_new >= after and self.is_open(job):
                self.events.clear(self.kind, job, detail={"closed_because":
                                                         f"no new mismatching seq for {after:g} s"})
                del self._jobs[job]

    # -- internals --------------------------------------------------------------------------------

    @staticmethod
    def _decided(judged: _Seq, world: int) -> bool:
        """Can the ranks still to report this seq change who the minority is? Reports arrive rank by rank: with
        2 of 3 ranks in, one on each side is a tie that the third decides. A seq is judged once every rank
        reported it, or once one side holds a strict majority of the world (the rest cannot outnumber it);
        an undecided seq comes back with the next merge that adds ranks to it. World size unknown (0): as is."""
        reported = judged.lo.count + judged.hi.count
        if world <= 0 or reported >= world:
            return True
        return max(judged.lo.count, judged.hi.count) * 2 > world

    def _judge(self, m) -> _Seq:
        top = max(1, self.config.top)
        lo, lo_ranks = _side(m.min_hash, m.min_what, m.min_ranks, top, f"seq {m.seq} min_ranks")
        hi, hi_ranks = _side(m.max_hash, m.max_what, m.max_ranks, top, f"seq {m.seq} max_ranks")
        side = minority(lo.count, hi.count)
        named = lo_ranks if side == "min" else hi_ranks if side == "max" else sorted(set(lo_ranks) | set(hi_ranks))
        majority = {"min": "max", "max": "min", "tie": "tie"}[side]
        return _Seq(m.seq, lo, hi, majority, named[:MAX_LISTED_RANKS])

    def _raise(self, job: str, state: _Job) -> None:
        assert state.first is not None and state.last is not None
        first = state.seqs[state.first]
        ranks = sorted({r for info in state.seqs.values() for r in info.minority_ranks})
        detail = {"summary": self._summary(first, state), **first.detail(), "first_seq": state.first,
                  "last_seq": state.last, "mismatched_seqs": state.count}
        if state.last != state.first and state.last in state.seqs:
            detail["latest"] = state.seqs[state.last].detail()
        self.raise_(job, step=self.context.latest_step_of(job), ranks=ranks, detail=detail,
                    severity=self.config.severity)

    @staticmethod
    def _summary(first: _Seq, state: _Job) -> str:
        if first.majority == "tie":
            lead = (f"collective mismatch at seq {first.seq}: {_ranks_text(first.lo)} issued "
                    f"'{first.lo.what}', {_ranks_text(first.hi)} issued '{first.hi.what}' (no majority)")
        else:
            minor, major = (first.hi, first.lo) if first.majority == "min" else (first.lo, first.hi)
            lead = (f"collective mismatch at seq {first.seq}: {_ranks_text(minor)} issued '{minor.what}' "
                    f"where {major.count} rank{'s' if major.count != 1 else ''} issued '{major.what}'")
        if state.count > 1:
            lead += f"; {state.count} seqs mismatch ({state.first}..{state.last})"
        return lead
