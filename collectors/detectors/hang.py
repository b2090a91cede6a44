"""Hang: live ranks that make no progress: a step still missing them past its deadline, or no step progress for T s.

Two rules, one event per job (they update the same event; `detail.reasons` says which hold):

- `missing_past_deadline`: a step was finalised without some ranks (the root seals a window only
  when its deadline has passed) and, `grace_s` later, no late delta has brought them. Missing means
  missing from the *step*, not from one of its windows: a rank that did not log a metric at a step is not
  hung (the SDK logs `collective_arrival`, `collective_wait` or `runqueue_wait` only when it could measure
  them, e.g. not on a first step whose flight recorder was not found yet; a job may log `loss` on rank 0
  only). So where the step has windows of the metrics the SDK logs when a rank *closes* the step
  (`CLOSING`: `step_time` and the collective figures), a rank is missing when none of those holds it (a
  rank that logged `loss` inside the step and then hung is still missing); where it has none (a job that
  closes steps with `end_step`), when none of the step's windows holds it. A missing rank whose heartbeat
  (the `progress.current_step` time buckets) shows it past that step is not hung either (its data was late
  or lost): it is dropped from the step for good, so a later heartbeat bucket without it (the rank exited,
  or the bucket went up before its beat) cannot name it again.
- `no_progress`: the job's latest finalised step has not moved for T = max(`no_progress_floor_s`,
  `no_progress_factor` x the median step interval) while some rank is still alive or stuck (a job
  whose ranks have all exited has ended, not hung).

Dead ranks are never named here: a rank whose process is gone did not hang, it died, and the `crash` event
(collectors/detectors/crash.py) names it with why. While ranks of the job are dead, `missing_past_deadline` is
not judged (the live ranks are missing because they wait for the dead ones, and usually die of it a moment
later); only `no_progress` is: live ranks that wait T seconds without progress for a dead one are a hang too
(it names the live ranks, `detail.dead` lists the dead ones for context).

The ranks behind are the live missing ranks, and (for no progress) the ranks at the progress minimum when
ranks disagree (bottom-k of the heartbeat bucket, exact), the ranks whose `collective.last_enqueued`
is behind when ranks send it, and the stuck ranks. Each carries `liveness`, the agent's own word: "alive"
(not stuck, dead or exited while the job has live ranks), "stuck" (alive, silent for longer than the agent's
--stuck-after), "exited" (it closed its run: `closed_ranks`), or "unknown" (no liveness data). The
event closes when no rule holds any more.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice

from pyroaring import BitMap

from collectors.common.rows import Row
from collectors.detectors.base import Detector, fnum
from telemetry.names import ARRIVAL_METRIC, PROGRESS_METRIC, RUNQUEUE_METRIC, WAIT_METRIC, WORK_METRIC
from telemetry.summary import Summary

MAX_TRACKED = 4096  # incomplete steps, and steps every rank reported, remembered per job
COLLECTIVE = "collective.last_enqueued"
# What the SDK logs as a rank closes a step (telemetry/sdk/run.py, Run.step): a rank in one of these windows of a
# step closed it. `step_time` always; the others when the rank could measure them.
CLOSING = frozenset({"step_time", ARRIVAL_METRIC, WAIT_METRIC, WORK_METRIC, RUNQUEUE_METRIC})


@dataclass
class HangConfig:
    enabled: bool = True
    grace_s: float = 2.0
    no_progress_floor_s: float = 60.0
    no_progress_factor: float = 10.0
    check_interval_s: float = 0.5
    progress_metric: str = PROGRESS_METRIC
    collective_metric: str = COLLECTIVE
    top: int = 8
    severity: str = "critical"


@dataclass
class _Incomplete:
    """A step finalised without some ranks in one of its windows; who is missing is judged at check time,
    once every window of the step had `grace_s` to arrive (they are finalised one by one, in any order)."""

    expected: int
    since: float
    deadline_wall: float
    present: BitMap                 # ranks in any window of the step
    closed: BitMap | None = None    # ranks in its CLOSING windows; None while it has none
    moved_on: BitMap = field(default_factory=BitMap)  # ranks their heartbeat showed past the step

    def missing(self) -> BitMap:
        out = BitMap()
        out.add_range(0, self.expected)
        out -= self.closed if self.closed is not None else self.present
        out -= self.moved_on
        return out


class _Steps:
    """A set of the latest MAX_TRACKED step indexes added (the oldest one added is forgotten first)."""

    def __init__(self) -> None:
        self._set: set[int] = set()
        self._order: deque[int] = deque()

    def __contains__(self, step: int) -> bool:
        return step in self._set

    def add(self, step: int) -> None:
        if step in self._set:
            return
        if len(self._order) == MAX_TRACKED:
            self._set.discard(self._order.popleft())
        self._order.append(step)
        self._set.add(step)


@dataclass
class _Job:
    max_step: int = -1
    last_advance: float = 0.0
    last_advance_wall: float = 0.0
    starts: deque = field(default_factory=lambda: deque(maxlen=33))
    incomplete: dict[int, _Incomplete] = field(default_factory=dict)  # by step
    # steps a CLOSING window of which held every expected rank (nobody missing, whatever else comes), and steps
    # any window of which did (nobody missing unless a CLOSING window says otherwise); oldest first, bounded
    closed: _Steps = field(default_factory=lambda: _Steps())
    whole: _Steps = field(default_factory=lambda: _Steps())
    progress: Summary | None = None
    progress_bucket: int = -1
    collective: Summary | None = None
    collective_bucket: int = -1


def _values_of(summary: Summary | None, ranks: list[int]) -> dict[int, float | None]:
    """What the bucket says for each rank: its value when among the bottom-k, else None (unknown)."""
    if summary is None:
        return {}
    exact: dict[int, float] = {}
    for value, source in summary.bottom():
        exact.setdefault(source, value)
    return {r: exact.get(r) for r in ranks}


class HangDetector(Detector):
    kind = "hang"

    def __init__(self, events, context=None, config: HangConfig | None = None,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        super().__init__(events, context)
        self.config = config or HangConfig()
        self.clock, self.wall = clock, wall
        self._jobs: dict[str, _Job] = {}

    def wants(self, row: Row) -> bool:
        return row.key.is_step or row.key.metric in (self.config.progress_metric, self.config.collective_metric)

    def jobs(self) -> list[str]:
        return list(self._jobs)

    def observe(self, row: Row) -> None:
        job, index, s = row.key.job, row.key.index, row.summary
        state = self._jobs.setdefault(job, _Job(last_advance=self.clock(), last_advance_wall=self.wall()))
        if not row.key.is_step:
            if row.key.metric == self.config.progress_metric and index >= state.progress_bucket:
                state.progress, state.progress_bucket = s, index
            elif row.key.metric == self.config.collective_metric and index >= state.collective_bucket:
                state.collective, state.collective_bucket = s, index
            return
        now = self.clock()
        if index > state.max_step:
            state.max_step, state.last_advance, state.last_advance_wall = index, now, self.wall()
            state.starts.append((index, now))
        if index in state.closed:
            return  # every rank closed this step
        closing = row.key.metric in CLOSING
        expected = BitMap()
        if row.expected:
            expected.add_range(0, row.expected)
        complete = not expected - s.sources
        found = state.incomplete.get(index)
        if complete and closing:
            state.incomplete.pop(index, None)
            state.closed.add(index)
            return
        if complete:
            state.whole.add(index)
        if found is None:
            if complete or row.late or (index in state.whole and not closing):
                return  # nobody is missing; a late delta of a step not tracked (any more) starts nothing
            found = state.incomplete[index] = _Incomplete(row.expected, now, row.finalised_ns / 1e9, BitMap())
            while len(state.incomplete) > MAX_TRACKED:
                state.incomplete.pop(min(state.incomplete))
        found.expected = max(found.expected, row.expected)
        if index in state.whole:
            found.present.add_range(0, found.expected)
        found.present |= s.sources
        if closing:
            found.closed = s.sources | found.closed if found.closed is not None else BitMap(s.sources)

    def median_interval(self, job: str) -> float:
        starts = list(self._jobs[job].starts)
        gaps = [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in zip(starts, starts[1:]) if s1 > s0]
        return statistics.median(gaps) if gaps else 0.0

    def no_progress_after(self, job: str) -> float:
        c = self.config
        return max(c.no_progress_floor_s, c.no_progress_factor * self.median_interval(job))

    def check(self, live: dict[str, dict]) -> None:
        """Judge every job; `live[job]` is the root's liveness view (CollectorServer.liveness)."""
        now = self.clock()
        failed: Exception | None = None
        for job in list(self._jobs):
            try:
                self._check(job, now, live.get(job, {}))
            except Exception as exc:  # one job's bad input must not blind the check for every other job
                failed = failed or exc
        if failed is not None:
            raise failed  # counted and logged by the suite, once per check, after every job was judged

    def _check(self, job: str, now: float, live: dict) -> None:
        c, state = self.config, self._jobs[job]
        dead = set(live.get("dead_ranks", []))
        stuck = set(live.get("stuck_ranks", []))
        closed = set(live.get("closed_ranks", []))  # closed their run: exited, neither alive nor dead
        alive_count = int(live.get("alive", 0) or 0)
        reasons: list[str] = []
        behind: dict[int, int] = {}  # rank -> the step it is missing (or the step it is at)
        missing_steps: dict[int, list[int]] = {}
        deadline_wall = None
        progress = state.progress
        bottom_max = progress.bottom()[-1][0] if progress is not None and progress.bottom() else None
        for step, inc in sorted(state.incomplete.items()):
            if now - inc.since < c.grace_s or dead:
                continue  # with ranks dead, the live ones wait for them: the crash's; no_progress judges them
            missing = inc.missing()
            if not missing:
                del state.incomplete[step]  # every rank reported it, or moved past it
                continue
            named = []
            ranks = list(islice(missing, 1024))
            known = _values_of(progress, ranks)
            for rank in ranks:
                if rank in dead:
                    continue  # it died: the crash event's, not a hang
                at = known.get(rank)
                if at is None and progress is not None and rank in progress.sources and bottom_max is not None:
                    at = bottom_max  # among the sources but above the bottom-k: at least this far
                if at is not None and at > step:
                    inc.moved_on.add(rank)  # its heartbeat shows it moved on (late or lost data): for good
                    continue
                named.append(rank)
                behind[rank] = min(step, behind.get(rank, step))
            if named:
                missing_steps.setdefault(step, [])
                missing_steps[step] = sorted(set(missing_steps[step]) | set(named))
                deadline_wall = inc.deadline_wall if deadline_wall is None else min(deadline_wall, inc.deadline_wall)
        if missing_steps:
            reasons.append("missing_past_deadline")
        if dead and not stuck and alive_count == 0 and live:
            missing_steps.clear()  # every rank still covered is dead: a crash, not a hang
            reasons.clear()
        quiet_s = now - state.last_advance
        threshold_s = self.no_progress_after(job)
        ended = bool(live) and alive_count == 0 and not stuck
        progress_view = self._progress_view(progress)
        collective_view = self._collective_view(state.collective)
        if state.max_step >= 0 and quiet_s > threshold_s and not ended:
            reasons.append("no_progress")
            if progress_view and progress_view["min_step"] < progress_view["max_step"]:
                for rank in progress_view["ranks_at_min"]:
                    behind.setdefault(rank, int(progress_view["min_step"]))
            for rank in (collective_view or {}).get("ranks_behind", []):
                behind.setdefault(rank, state.max_step + 1)
            for rank in stuck:
                behind.setdefault(rank, state.max_step + 1)
            for rank in dead:
                behind.pop(rank, None)
        if not reasons:
            # A window finalised with ranks missing is judged only `grace_s` later; until then the event
            # stays as it is (else a no-progress event would close the moment that window moved the
            # latest step, and the same hang reopen as a new event a grace period later).
            judging = any(now - inc.since < c.grace_s for inc in state.incomplete.values())
            if self.is_open(job) and not judging:
                self.clear(job, step=state.max_step)
            return
        ranks = sorted(behind)
        hosts = self.context.hosts_of(job)
        currents = _values_of(progress, ranks[: 4 * c.top])
        listed = []
        for rank in ranks[: 4 * c.top]:
            liveness = ("stuck" if rank in stuck else "exited" if rank in closed else "dead" if rank in dead
                        else "alive" if live and alive_count > 0 else "unknown")
            current = currents.get(rank)
            listed.append({"rank": rank, "host": hosts.get(rank), "liveness": liveness, "missing_step": behind[rank],
                           "current_step": None if current is None else int(current)})
        first_step = min(missing_steps) if missing_steps else state.max_step + 1
        event = self.events.get_open(self.kind, job)
        wall = self.wall()
        if event is None:
            detected_at = wall
            after = wall - deadline_wall if deadline_wall is not None else None
        else:
            detected_at = event.detail.get("detected_at", wall)
            after = event.detail.get("detected_after_deadline_s")
        start = deadline_wall if deadline_wall is not None else wall
        dead_listed = sorted(dead)[:64]
        detail = {
            "summary": (f"step {first_step}: ranks {ranks[:8]} make no progress" if ranks else
                        f"step {first_step}: no rank makes progress (none is behind the others)")
                       + (f" (dead, see the crash event: {dead_listed[:8]})" if dead_listed else ""),
            "reasons": reasons, "ranks": listed, "dead": dead_listed,
            "stuck": [r for r in ranks if r in stuck][:64],
            "missing": {str(s): r[:64] for s, r in sorted(missing_steps.items())[:8]},
            "progress": progress_view, "collective": collective_view,
            "last_step": state.max_step, "no_progress_s": round(quiet_s), "no_progress_threshold_s":
                fnum(threshold_s, 3), "deadline_time": fnum(deadline_wall, 3) if deadline_wall else None,
            "detected_at": fnum(detected_at, 3),
            "detected_after_deadline_s": fnum(after, 3) if after is not None else None,
        }
        self.events.raise_(self.kind, job, step=first_step if event is None else None, ranks=ranks,
                           hosts=sorted({hosts[r] for r in ranks if r in hosts}), detail=detail,
                           severity=c.severity, time=start)

    def _progress_view(self, progress: Summary | None) -> dict | None:
        if progress is None or not progress.count:
            return None
        low = progress.min
        return {"min_step": int(low), "max_step": int(progress.max), "argmin": progress.argmin,
                "ranks_at_min": sorted({s for v, s in progress.bottom() if v == low}),
                "bottom": [[int(v), s] for v, s in progress.bottom(min(self.config.top, progress.k))],
                "ranks_reporting": len(progress.sources)}

    def _collective_view(self, collective: Summary | None) -> dict | None:
        if collective is None or not collective.count:
            return None
        high = collective.max
        return {"min_enqueued": int(collective.min), "max_enqueued": int(high), "argmin": collective.argmin,
                "ranks_behind": sorted({s for v, s in collective.bottom() if v < high})}
