"""Straggler: the rank that makes the others wait, named per step with the wait it costs.

Three signals, chosen per job, the first a job logs:

* `collective_wait` (logged by the SDK under torch.distributed; telemetry.torch.waits): per rank and step,
  the seconds it had a collective outstanding, over every collective of every process group. The rank the
  others wait for waits least: its evidence per step is `x` = (p50 - min) / step_time p50, the share of the
  step the median rank lost to it (in a job of two ranks the other rank's wait stands for the median: `peer_median`,
  as the median of two is their mean and would halve the lead), accumulated per candidate rank by a CUSUM whose
  state is O(k) per job
  (collectors/detectors/wait_score.py, which says how it separates noise from a straggler and how fast it
  names one at each severity). The event names the rank once its score reaches `wait_threshold`; its step
  is where the score left zero. Once a job logs waits, its arrivals and step times are not judged.
  A rank starved of CPU is left to cpu_starved (`starved_leave`): no waits event opens or holds on a rank
  cpu_starved's open event names, or one its run-queue wait shows starved on `starved_hits` of the job's last
  `starved_window` steps (docs/detectors.md, "Left to cpu_starved", for what that did to the replayed matrices).

* `collective_arrival` (logged by the SDK itself under torch.distributed; see
  telemetry.torch.collective.ArrivalClock): per rank, the seconds from its previous synchronisation to its
  last collective of the step. Under synchronous collectives every rank's wall `step_time` is the slowest
  rank's, so only the arrival can name it: `argmax` arrived last and `lag` = max - p50 is how long the
  median rank waited for it. A rank is late on a step when it arrives more than max(`min_wait_frac` x
  `scale`, `min_wait_s`) after the median rank, `scale` = max(step_time p50, arrival max); below
  `min_wait_s` a wait is the OS scheduler's noise on a shared host. A straggler is a rank late on at least
  `persist_k` of the last `persist_n` steps (14 of 16): measured on real torchrun jobs on an
  oversubscribed 2-core machine (bench/detection.py, replayed with bench/detection_jobs/replay.py), the
  scheduler holds one rank back for bursts of up to 13 steps (8 of 9 and 12 of 13 late: 7 of 8 called
  them stragglers), a slow rank stays late on ~95 % of its steps. Only steps
  where every rank reported an arrival are judged (a rank without one could be the slow one). Once a job
  logs arrivals, its `step_time` is not judged.
* `step_time`, for jobs without collectives (each rank's wall time is its own): over when max / p50 >
  max(`factor`, `baseline_factor` x the run's median ratio over its last `baseline_steps` normal steps),
  so a job whose ranks are always a little uneven does not cry wolf.

The first `warmup` steps of either signal are start-up (first iterations, allocator, compilation, DDP
building its buckets) and are not judged. Noise does not make a straggler: on `step_time` an event opens
after `consecutive` over steps in a row whose slowest rank is the *same* rank (a rank descheduled once, or a
different rank each step, is not one), is updated every over step, and closes after `clear_steps` normal ones.
Its `step` is the first over step.
The detail names the top ranks above the threshold and the seconds they cost: `wait_s` = max - p50 (the
median rank's wait) and `wait_rank_s` = count x max - sum (every rank's waiting, summed), per step and
in total over the event.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field

from collectors.common.rows import Row
from collectors.detectors.base import Baseline, distinct, event_time, fnum, p50
from collectors.detectors.cpu_starved import CpuStarvedDetector
from collectors.detectors.cpu_work import StepCpu, cpu_ratio, expected_queue
from collectors.detectors.streak import StreakDetector, StreakState
from collectors.detectors.wait_score import WaitScore
from telemetry.names import ARRIVAL_METRIC as ARRIVAL
from telemetry.names import ONCPU_METRIC, RUNQUEUE_METRIC, WAIT_METRIC, WAIT_SHARE_METRIC
from telemetry.summary import Summary

CPU_STARVED = CpuStarvedDetector.kind

# In a job of this many ranks or fewer a rank's lead is measured against the median of the *other* ranks (exact:
# the summary's top-k holds every rank), not of all. The median of two values is their mean: at two ranks the
# least-waiting rank's lead over p50 is half its lead over its peer, and a 2x rank (evidence 0.25 a step, not 0.5)
# was named 5-7 steps after its onset, 1.5x 18-24 (bounds 3 and 5). Not at three: there the other two's median is
# their mean, which named a CPU-bound 1.5x rank within 5 steps on 20/20 model jobs (17/20 before) but left a 1.1x
# one at 8 runnable threads per CPU unnamed on 3 of 4 (docs/detectors.md, "By world size").
PEER_WORLD = 2


def peer_median(s: Summary, rank: int) -> float:
    """The median of the ranks' values other than `rank`'s in a job of PEER_WORLD ranks or fewer (from the exact
    top-k), else the median of all (one rank of four or more moves it little)."""
    if s.count <= PEER_WORLD:
        others = [value for value, r in s.top() if r != rank]
        if len(others) == s.count - 1:
            return statistics.median(others)
    return p50(s)


def tied_group(s: Summary) -> tuple[tuple[int, ...], float]:
    """The ranks slowed alike on a step of running shares: the lowest share and each next-lowest one closer to it than
    to the median of the ranks above that one, while one rank at least is left above (sorted), and `x`, the median of
    the ranks above the group less the group's highest share; ((), 0.0) when the lowest share stands alone. From the
    exact bottom-k and top-k: in a world they do not cover, the median above is the step's p50 and the group is at
    most a quarter of the world (no more of it is known).

    Why: two ranks slowed alike take turns at the lowest share, and where they are half the world or more the
    median rank is one of them: two equal 1.1x ranks of three left every rank's own gap at the noise (review)."""
    known = {rank: value for value, rank in s.bottom()} | {rank: value for value, rank in s.top()}
    exact = len(known) >= s.count
    values = sorted((value, rank) for rank, value in known.items()) if exact else s.bottom()
    if len(values) < 2 or not all(math.isfinite(v) for v, _ in values):
        return (), 0.0
    least = values[0][0]
    size = 1
    while size < len(values):
        rest = [v for v, _ in values[size + 1:]]
        if exact and not rest:
            break  # one rank at least is left above the group
        if not exact and size + 1 > s.count // 4:
            break
        above = statistics.median(rest) if exact else p50(s)
        if not values[size][0] - least < (above - least) / 2:
            break
        size += 1
    if size < 2:
        return (), 0.0
    above = statistics.median(v for v, _ in values[size:]) if exact else p50(s)
    return tuple(sorted(rank for _, rank in values[:size])), above - values[size - 1][0]


def _others_median(ordered: list[float], value: float) -> float:
    """The median of sorted `ordered` without one occurrence of `value` (one of them)."""
    rest = list(ordered)
    rest.remove(value)
    return statistics.median(rest)


def _peer_queue(queued: tuple[float, dict[int, float], dict[int, float]], rank: int) -> float:
    """A step's median run-queue wait as `rank`'s peers had it (peer_median, from the kept top-k), else the step's."""
    top = queued[1]
    if 2 <= len(top) <= PEER_WORLD and rank in top:
        return statistics.median(value for r, value in top.items() if r != rank)
    return queued[0]


@dataclass
class StragglerConfig:
    enabled: bool = True
    metric: str = "step_time"
    arrival_metric: str = ARRIVAL
    wait_metric: str = WAIT_METRIC
    # Each rank's running wait share, kept by its agent (collectors/agent/wait_share.py): the slow and persistence
    # lanes judge its exact argmin when the job has it (slight stragglers among many ranks: wait_score.py)
    wait_share_metric: str = WAIT_SHARE_METRIC
    # Each rank's run-queue wait per step (telemetry/sdk/runqueue.py): the part of the least-waiting rank's lead
    # that its run-queue wait over the median rank's explains is discounted (it was descheduled, not slow)
    runqueue_metric: str = RUNQUEUE_METRIC
    runqueue_discount: bool = True
    # Each rank's step-thread time on a CPU per step (telemetry/sdk/runqueue.py): where the job logs it, the rules
    # that leave a rank whose run-queue wait explains its lead (descheduled_leave, starved_leave) compare that wait
    # with the median rank's scaled by the rank's CPU work over the median rank's (collectors/detectors/cpu_work.py):
    # a CPU-bound straggler on a loaded host queues more in proportion to its own work and is not excused by it
    oncpu_metric: str = ONCPU_METRIC
    oncpu_scale: bool = True
    oncpu_steps: int = 5  # ... by the least of the rank's ratios of its last this many steps (cpu_work.cpu_ratio),
    oncpu_margin: float = 0.5  # ... or by its ratio this step less this, whichever is more
    # ... and on a step where the discount can act on the rank judged (its run-queue wait known: not a kernel
    # counting nothing, a row missing ranks, a rank outside the top-k) the fast lane names at this threshold
    # instead of wait_fast_threshold (1.5x within 5 steps on more of the shapes)
    runqueue_fast_threshold: float = 0.6
    wait_share_drift: float = 0.05   # the slow lane's least reference on the running shares
    wait_share_margin: float = 0.01  # ... and at least this over the job's own level of them
    wait_share_spread_k: float = 2.0  # ... and this many times their own spread (median absolute deviation)
    wait_share_settle: int = 16     # running-share steps of start-up at least (the averages settle: weight 1/8)
    wait_share_recovered: float = 0.6  # an event's rank whose running-share gap fell under this x its level recovers
    # The CUSUM lanes of wait_score.py: reference (evidence per step below it is noise) and threshold (shares of
    # a step lost to the rank, summed) of the fast lane (severe stragglers) and of the slow one (slight ones).
    wait_fast_drift: float = 0.15
    wait_fast_threshold: float = 0.8
    wait_fast_steps: int = 3       # ... and names a rank only once it waited least this many steps in a row
    wait_drift: float = 0.08
    wait_threshold: float = 1.5
    wait_cap: float = 2.0          # a score's ceiling, in thresholds: bounds how long the event takes to close
    wait_track: int = 8            # candidate ranks scored per job (the state is O(this), whatever the world)
    wait_min_gap_s: float = 0.002  # a median-minus-least wait below this is no evidence
    wait_background: int = 64      # steps of the job's own evidence level (its median raises the references)
    wait_reference: float = 0.12   # the evidence level the references are set for (a job above it raises them)
    wait_warmup: int = 10          # a job's first steps of waits, not judged (start-up: the slowest, noisiest)
    wait_clear_steps: int = 5      # steps in a row another rank waits least that close the event
    # A rank starved of CPU is a host problem (cpu_starved.py), not a straggler: the waits' lanes do not open (or
    # hold) an event on a rank the open cpu_starved event names, or one whose run-queue wait exceeded the median
    # rank's by `starved_excess` of the step (and `starved_min_s`) on `starved_hits` of the job's last
    # `starved_window` steps (cpu_starved's own per-step test). Injected and real slow ranks do not queue more.
    starved_leave: bool = True
    starved_excess: float = 0.25
    starved_min_s: float = 0.005
    starved_hits: int = 5
    starved_window: int = 10
    # ... and one of those within its last `starved_recent` steps: a rank starved for a while and no longer (a
    # straggler the CPU starved too, before and at its onset) is named once that is over, not `starved_window` later
    starved_recent: int = 3
    # A rank whose lead is, over its recent steps, mostly its step thread's run-queue wait over the median rank's
    # was descheduled, not slow, even where no single step shows it starved: the waits' lanes do not open (or
    # hold) an event on a rank whose excess run-queue wait summed over its least-waiting steps of the job's last
    # `descheduled_window` steps (at least `descheduled_min_steps` of them) is `descheduled_share` or more of the
    # lead those steps gave it. A CPU-bound straggler on a host of L threads per CPU queues (L - 1) / L of its
    # lead: left from L = 5 (0.8), and below 4/3x nothing names it then (docs/detectors.md: what it cannot see).
    # Off with `runqueue_discount` (the waits alone).
    descheduled_leave: bool = True
    descheduled_share: float = 0.8
    descheduled_window: int = 60
    descheduled_min_steps: int = 8
    factor: float = 1.5
    min_wait_frac: float = 0.25
    min_wait_s: float = 0.02
    persist_k: int = 14
    persist_n: int = 16
    warmup: int = 5
    consecutive: int = 2
    clear_steps: int = 2
    baseline_steps: int = 50
    baseline_factor: float = 1.25
    min_baseline: int = 5
    top: int = 5
    severity: str = "warning"

    def __post_init__(self) -> None:
        if not (isinstance(self.oncpu_steps, int) and 1 <= self.oncpu_steps <= 1000):
            raise ValueError(f"straggler: oncpu_steps must be in 1..1000, got {self.oncpu_steps!r}")
        if not (isinstance(self.oncpu_margin, (int, float)) and math.isfinite(self.oncpu_margin)
                and self.oncpu_margin >= 0):
            raise ValueError(f"straggler: oncpu_margin must be a finite number >= 0, got {self.oncpu_margin!r}")
        if not 0 < self.starved_window <= 1000:
            raise ValueError(f"straggler: starved_window must be in 1..1000, got {self.starved_window}")
        if not 0 < self.starved_hits <= self.starved_window:
            raise ValueError(f"straggler: starved_hits must be in 1..starved_window ({self.starved_window}), "
                             f"got {self.starved_hits}")
        if not self.starved_excess > 0:
            raise ValueError(f"straggler: starved_excess must be > 0, got {self.starved_excess}")
        if not 0 < self.starved_recent <= self.starved_window:
            raise ValueError(f"straggler: starved_recent must be in 1..starved_window ({self.starved_window}), "
                             f"got {self.starved_recent}")
        if not 0 < self.descheduled_share <= 1:
            raise ValueError(f"straggler: descheduled_share must be in (0, 1], got {self.descheduled_share}")
        if not 0 < self.descheduled_min_steps <= self.descheduled_window <= 1000:
            raise ValueError("straggler: descheduled_min_steps and descheduled_window must satisfy "
                             f"1 <= descheduled_min_steps <= descheduled_window <= 1000, got "
                             f"{self.descheduled_min_steps} and {self.descheduled_window}")


@dataclass
class _State(StreakState):
    streak_rank: int = -1     # the rank the streak is about (a different one ends it: noise)
    streak_group: tuple[int, ...] = ()  # the ranks slowed alike its event names (tied_group; () for one rank)
    wait_s_total: float = 0.0
    wait_rank_s_total: float = 0.0
    steps: int = 0
    arrivals: bool = False    # the job logs collective_arrival: judge that, not step_time
    warm: int = 0             # steps seen (the first `warmup` are start-up, not judged)
    step_scale: float = 0.0   # the last step_time p50 seen
    step_scales: dict[int, float] = field(default_factory=dict)  # the last few steps' step_time p50, by step
    waits: bool = False       # the job logs collective_wait: judge that only
    score: WaitScore | None = None  # the waits' CUSUM per candidate rank
    shares: bool = False      # the job has running wait shares (its agents make them): they judge slight ranks
    share_warm: int = 0       # running-share steps seen (the first `wait_warmup` are start-up)
    share_last: int = -1      # the last running-share step judged
    raw_held: int = -1        # the last step whose per-step waits named or held the event's rank
    # the event's running-share gaps on the steps it held (their median is the level a recovered rank's falls from)
    share_held: deque[float] = field(default_factory=lambda: deque(maxlen=16))
    share_gap: float = 0.0    # the latest running-share gap judged
    # the last few steps' run-queue waits, by step: (p50, {rank: seconds} of the exact top-k, of the exact bottom-k)
    queued: dict[int, tuple[float, dict[int, float], dict[int, float]]] = field(default_factory=dict)
    oncpu: dict[int, StepCpu] = field(default_factory=dict)  # the last `oncpu_steps` steps' on-CPU times, by step
    starved: dict[int, deque[int]] = field(default_factory=dict)  # rank -> its recent starved steps
    # the job's last judged steps whose run-queue waits were known: (step, least-waiting rank, its lead over the
    # median rank, its run-queue wait over the median rank's), for `_descheduled` (O(descheduled_window))
    leads: deque[tuple[int, int, float, float]] = field(default_factory=deque)
    # The same for groups slowed alike (`_note_group`): (step, the group, its lead over the other ranks' median wait,
    # its run-queue wait over theirs, the step's length), members averaged; from the last few steps' exact waits and
    # tied groups
    group_leads: deque[tuple[int, tuple[int, ...], float, float, float]] = field(default_factory=deque)
    wait_values: dict[int, dict[int, float]] = field(default_factory=dict)
    # each rank's lead over the other ranks' median wait, as a share of the step, on the last 60 steps whose waits were
    # exact (a world of 2k ranks or fewer): `_waits_agree`
    rank_leads: deque[dict[int, float]] = field(default_factory=lambda: deque(maxlen=60))
    group_pending: dict[int, tuple[int, ...]] = field(default_factory=dict)


@dataclass
class _Judged:
    over: bool
    measure: float      # ratio (step_time) or share of the step waited for the culprit (arrival)
    threshold: float
    cut: float          # values above it are named (step_time)
    wait_s: float
    median: float
    culprit: int        # the rank the others wait for
    ranks: list[int] | None = None  # named, when the signal says so itself (arrival)
    began: int = 0      # steps ago the culprit's lateness began (arrival: within the persistence window)


class StragglerDetector(StreakDetector[_State]):
    kind = "straggler"

    def __init__(self, events, context=None,
                 config: StragglerConfig | None = None) -> None:
        self.config = config or StragglerConfig()
        super().__init__(events, context, self.config.baseline_steps)
        self.metrics = frozenset({self.config.metric, self.config.arrival_metric, self.config.wait_metric,
                                  self.config.wait_share_metric, self.config.runqueue_metric,
                                  self.config.oncpu_metric})
        self._recent: dict[str, deque[frozenset[int]]] = {}  # job -> ranks late on each of its last steps

    def new_state(self) -> _State:
        return _State()

    def observe(self, row: Row) -> None:
        if row.late or not row.key.is_step:
            return
        c, job, step, s = self.config, row.key.job, row.key.index, row.summary
        state = self.state(job)
        if row.key.metric == c.wait_metric:
            self._waits(row, state)
            return
        if row.key.metric == c.wait_share_metric:
            self._shares(row, state)
            return
        if row.key.metric == c.runqueue_metric:
            self._queued(state, s, step, row.expected)
            return
        if row.key.metric == c.oncpu_metric:
            self._oncpu(state, s, step, row.expected)
            return
        arrival = row.key.metric == c.arrival_metric
        if state.waits:
            if not arrival:
                self._scale(state, s, step)
            return
        if not arrival:
            self._scale(state, s, step)
            if state.arrivals:
                return
        elif not state.arrivals:
            state.arrivals = True
            state.last_step, state.warm = -1, 0  # judged on step_time until now: start again on the new signal
            self._baseline.pop(job, None)
        if step <= state.last_step or s.count < 2 or not math.isfinite(s.max):
            return
        if arrival and len(s.sources) < row.expected:
            return
        if state.warm < c.warmup:
            state.warm += 1
            return
        baseline = self.baseline(job)
        judged = self._arrival(s, state, job) if arrival else self._step_time(s, baseline)
        if judged is None:
            return
        state.last_step = step
        if not judged.over:
            baseline.add(judged.measure)
            self.normal(job, state, step, c.clear_steps)
            return
        if state.streak and judged.culprit != state.streak_rank and not self.is_open(job):
            state.streak = 0  # a different rank each step is noise, not a straggler
        if self.over(state, step - judged.began, event_time(row)):  # a streak begins (arrival: when the lateness did)
            state.streak_rank = judged.culprit
            if not self.is_open(job):
                state.wait_s_total = state.wait_rank_s_total = 0.0
                state.steps = 0
        wait_rank_s = max(0.0, s.count * s.max - s.sum)
        state.wait_s_total += judged.wait_s
        state.wait_rank_s_total += wait_rank_s
        state.steps += 1
        if not self.due(job, state, 1 if arrival else c.consecutive):
            return
        ranks = judged.ranks or distinct(s.top(), lambda v: v > judged.cut, c.top) or [judged.culprit]
        open_event = self.events.get_open(self.kind, job)
        signal = c.arrival_metric if arrival else c.metric
        if arrival:
            summary = (f"rank {ranks[0]} reaches the step's last collective {judged.wait_s:.3g} s after the "
                       f"median rank ({judged.measure:.0%} of the step spent waiting for it)")
        else:
            summary = (f"rank {ranks[0]} at {s.max:.3g} s vs median {judged.median:.3g} s "
                       f"({judged.measure:.2f}x); ranks wait {judged.wait_s:.3g} s per step")
        detail = {
            "summary": summary, "signal": signal,
            "threshold": fnum(judged.threshold, 4), "p50_s": fnum(judged.median), "max_s": fnum(s.max),
            "slowest_rank": s.argmax, "top": [[fnum(v), r] for v, r in s.top(c.top)],
            "wait_s": fnum(judged.wait_s), "wait_rank_s": fnum(wait_rank_s),
            "wait_s_total": fnum(state.wait_s_total), "wait_rank_s_total": fnum(state.wait_rank_s_total),
            "steps": state.steps, "detected_step": open_event.detail.get("detected_step") if open_event else step,
        }
        measure = "wait_frac" if arrival else "ratio"
        detail[measure] = fnum(judged.measure, 4)
        detail[f"baseline_{measure}"] = fnum(baseline.median(), 4) if len(baseline) else None
        self.raise_streak(job, state, step, open_event, ranks=ranks, detail=detail, severity=c.severity)

    @staticmethod
    def _scale(state: _State, s: Summary, step: int) -> None:
        median = p50(s)
        if median > 0 and math.isfinite(median):
            state.step_scale = median
            state.step_scales[step] = median
            while len(state.step_scales) > 16:
                del state.step_scales[min(state.step_scales)]

    def _queued(self, state: _State, s: Summary, step: int, expected: int) -> None:
        """A step's run-queue waits: kept (the median and the exact top-k by rank) for that step's waits. A row
        missing ranks is not kept (no discount that step, as `_waits` judges no step missing a rank's wait): its
        median is not the job's, and a rank absent from it may be the one judged."""
        if len(s.sources) < expected:
            return
        median = p50(s)
        if not math.isfinite(median) or not s.max > 0:
            return  # a kernel that counts nothing (every rank 0): no discount can act on this step
        state.queued[step] = (median, {rank: value for value, rank in s.top()},
                              {rank: value for value, rank in s.bottom()})
        self._note_starved(state, s, step)
        while len(state.queued) > 16:
            del state.queued[min(state.queued)]

    def _oncpu(self, state: _State, s: Summary, step: int, expected: int) -> None:
        """A step's on-CPU times (the median and the exact top-k and bottom-k by rank), kept for that step's
        run-queue waits and waits (the suite hands a step's on-CPU row first); none where they cannot scale."""
        if not self.config.oncpu_scale:
            return
        cpu = StepCpu.of(s, expected, state.step_scales.get(step, state.step_scale) or math.inf)
        if cpu is None:
            return
        state.oncpu[step] = cpu
        while len(state.oncpu) > self.config.oncpu_steps:
            del state.oncpu[min(state.oncpu)]

    def _expected_queue(self, state: _State, step: int, rank: int, median: float) -> float:
        """What the median rank would have queued doing `rank`'s CPU work this step (cpu_work.py): its run-queue
        wait `median` scaled by the rank's on-CPU time over the median rank's, where the step's are known."""
        return expected_queue(median, cpu_ratio(state.oncpu, rank, step, self.config.oncpu_steps,
                                                 self.config.oncpu_margin))

    def _note_starved(self, state: _State, s: Summary, step: int) -> None:
        """The ranks of the step's exact run-queue top-k starved on it by `starved_excess` and `starved_min_s`
        (cpu_starved's per-step test; the step's length is its step_time p50, the last one seen when its window
        has not come), over what the median rank would have queued doing the rank's CPU work."""
        c = self.config
        scale = state.step_scales.get(step, state.step_scale)
        if not scale > 0:
            return
        median = p50(s) if s.count > 2 else s.min
        for value, rank in s.top():
            if value >= c.starved_min_s and value - self._expected_queue(state, step, rank, median) \
                    >= c.starved_excess * scale:
                hits = state.starved.setdefault(rank, deque(maxlen=c.starved_window))
                if not hits or hits[-1] < step:
                    hits.append(step)

    def _note_lead(self, state: _State, step: int, rank: int, lead: float) -> None:
        """The step's least-waiting rank, its lead and its run-queue wait over the median rank's (absolute: the
        question is how much of the lead the queue explains; the median rank's scaled by the rank's CPU work over
        the median rank's where the step's on-CPU times are known: a CPU-bound straggler on a host of L threads per
        CPU queues (L - 1) / L of its lead for its own work, and was left from L = 5), for `_descheduled`; a step
        whose run-queue waits
        are unknown adds nothing. A rank outside the step's exact top-k (a world over its k) counts with its exact
        wait where the bottom-k holds it, else (between the two, about the median) with no excess: dropping the
        step kept only the steps where the rank queued unusually long, and a 1.1x sleeping straggler of a 16-rank
        world was left on every seed. Each step's lead and excess count up to the job's typical step (the median
        of its recent step_time p50s): in seconds uncapped, one step held on the run queue for 2 s (20 steps'
        worth) outweighed every lead after it, and a 2x straggler whose onset followed it was left for 4-5 steps
        (1.5x: 9-10). Capped, not divided by each step's length: as shares, a rank starved before its onset (its
        excess half of each short step) carried that surplus over its fault's long steps (the recorded fsdp2
        run of tests/test_straggler_waits.py named at 22 instead of 19)."""
        c = self.config
        queued = state.queued.get(step)
        if queued is None or not math.isfinite(lead):
            return
        value = queued[1].get(rank, queued[2].get(rank))
        if value is not None and not math.isfinite(value):
            return
        typical = statistics.median(state.step_scales.values()) if state.step_scales else math.inf
        excess = 0.0 if value is None else value - self._expected_queue(state, step, rank, _peer_queue(queued, rank))
        state.leads.append((step, rank, min(lead, typical), max(-typical, min(excess, typical))))
        while state.leads and state.leads[0][0] <= step - c.descheduled_window:
            state.leads.popleft()

    def _keep_waits(self, state: _State, step: int, s: Summary) -> None:
        """A step's waits by rank, where the summary holds every rank's (a world of 2k ranks or fewer), kept for
        the group of that step (`_note_group`; windows of one step come in any order)."""
        values = {rank: value for value, rank in s.bottom()} | {rank: value for value, rank in s.top()}
        if len(values) < s.count:
            return
        state.wait_values[step] = values
        scale = state.step_scales.get(step)
        if scale and len(values) >= 3 and all(math.isfinite(v) for v in values.values()):
            ordered = sorted(values.values())
            state.rank_leads.append({rank: (_others_median(ordered, value) - value) / scale
                                     for rank, value in values.items()})
        while len(state.wait_values) > 16:
            del state.wait_values[min(state.wait_values)]
        self._note_group(state, step)

    def _note_group(self, state: _State, step: int) -> None:
        """Once a step's tied group (running shares) and its waits and run-queue waits are all known: the group's
        lead over the other ranks' median wait and its run-queue wait over theirs (each member's, averaged; the
        median rank's scaled by the member's CPU work, as `_note_lead`), for `_group_descheduled`. In a world where
        the group is half the ranks or more the median rank is one of them, so `_note_lead`'s figures say nothing of
        it: two ranks of three that queued more than the third (the scheduler gave it more CPU) were named on
        recorded clean runs here (ddp, sync2) before this."""
        group, waits, queued = state.group_pending.get(step), state.wait_values.get(step), state.queued.get(step)
        while len(state.group_pending) > 16:
            del state.group_pending[min(state.group_pending)]
        if group is None or waits is None or queued is None:
            return
        del state.group_pending[step]
        rest = [rank for rank in waits if rank not in group]
        by_rank = queued[1] | queued[2]
        if not rest or any(rank not in by_rank or rank not in waits for rank in (*group, *rest)):
            return
        scale = state.step_scales.get(step)
        if not scale:
            return
        typical = statistics.median(state.step_scales.values())
        wait_rest = statistics.median(waits[rank] for rank in rest)
        queue_rest = statistics.median(by_rank[rank] for rank in rest)
        lead = statistics.fmean(wait_rest - waits[rank] for rank in group)
        expected = {rank: expected_queue(queue_rest, self._group_cpu_ratio(state, rank, rest, step)) for rank in group}
        excess = statistics.fmean(by_rank[rank] - expected[rank] for rank in group)
        if not (math.isfinite(lead) and math.isfinite(excess)):
            return
        state.group_leads.append((step, group, max(-typical, min(lead, typical)), max(-typical, min(excess, typical)),
                                  scale))
        while state.group_leads and state.group_leads[0][0] <= step - self.config.descheduled_window:
            state.group_leads.popleft()

    def _group_cpu_ratio(self, state: _State, rank: int, rest: list[int], step: int) -> float | None:
        """`rank`'s CPU work over the median of the `rest` ranks' (cpu_work.cpu_ratio, each step's median the rest's:
        the median rank may be one of the rank's own group), where the steps' on-CPU times hold them all."""
        history = {}
        for at, cpu in state.oncpu.items():
            theirs = [cpu.by_rank[r] for r in rest if r in cpu.by_rank]
            if len(theirs) == len(rest) and rank in cpu.by_rank and statistics.median(theirs) > 0:
                history[at] = StepCpu(statistics.median(theirs), cpu.by_rank)
        return cpu_ratio(history, rank, step, self.config.oncpu_steps, self.config.oncpu_margin)

    def _group_descheduled(self, state: _State, group: tuple[int, ...], step: int, least_lead: float) -> bool:
        """A group slowed alike is not named: over the steps of the last `descheduled_window` on which it was the
        tied group (`descheduled_min_steps` at least; fewer: not named yet), its lead over the other ranks' median
        wait is under `least_lead` of those steps' length, or (`_descheduled` for a group) its run-queue wait over
        theirs adds up to `descheduled_share` of that lead.

        The lead, from the step's own waits: the agents' running shares add a rank's run-queue wait over its
        host's other ranks' to its share (a descheduled rank keeps its peers' share: collectors/agent/wait_share.py),
        so a third rank descheduled more than two others lifts its share over theirs and the two look tied ahead of
        it, though nobody waited for them (a recorded clean fsdp2 run of three: its shares' gap 0.045, its waits'
        ~0.01)."""
        c = self.config
        mine = [(lead, excess, scale) for s, g, lead, excess, scale in state.group_leads
                if g == group and step - c.descheduled_window < s]
        if len(mine) < c.descheduled_min_steps:
            return True
        lead = math.fsum(v for v, _, _ in mine)
        if lead < least_lead * math.fsum(v for _, _, v in mine):
            return True
        if not (c.descheduled_leave and c.runqueue_discount):
            return False
        return math.fsum(e for _, e, _ in mine) >= c.descheduled_share * lead

    def _descheduled(self, state: _State, rank: int, step: int) -> bool:
        """Over its least-waiting steps of the last `descheduled_window` (`descheduled_min_steps` at least), the
        run-queue wait `rank` had over the median rank's adds up to `descheduled_share` of the lead it had: the
        others waited for a rank that was ready to run and got no CPU. Pooled over the steps, not per step: the
        per-step discount keeps each step's positive remainder, and on clean runs of this loaded 2-core machine
        those remainders, summed over 60 steps, named ranks whose queueing explained 0.9-1.0 of their lead
        (docs/detectors.md, "Descheduled over many steps")."""
        c = self.config
        if not (c.descheduled_leave and c.runqueue_discount):  # without the discount, judged on the waits alone
            return False
        return self._queue_explains(state, rank, step, c.descheduled_window, c.descheduled_min_steps,
                                    c.descheduled_share)

    @staticmethod
    def _queue_explains(state: _State, rank: int, step: int, window: int, least_steps: int, share: float) -> bool:
        """Over its least-waiting steps of the last `window` (`least_steps` of them at least), `rank`'s run-queue
        wait over the median rank's adds up to `share` of the lead it had on them."""
        mine = [(lead, excess) for s, r, lead, excess in state.leads if r == rank and step - window < s]
        if len(mine) < least_steps:
            return False
        lead = math.fsum(v for v, _ in mine)
        return lead > 0 and math.fsum(e for _, e in mine) >= share * lead

    def _left_to_cpu_starved(self, state: _State, job: str, rank: int, step: int, descheduled: bool = True) -> bool:
        """`rank` is starved of CPU now (cpu_starved's event names it, or its run-queue wait says so on
        `starved_hits` of the last `starved_window` steps), or was descheduled over its recent least-waiting
        steps (`_descheduled`; not asked with `descheduled` false: a rank of a group slowed alike, whose lead over
        the median rank - one of the group where it is half the world - is not the group's): its event is
        cpu_starved's (or nobody's), not a straggler's."""
        c = self.config
        if descheduled and self._descheduled(state, rank, step):
            return True
        if not c.starved_leave:
            return False
        hits = state.starved.get(rank)
        if not (hits and step - c.starved_recent < hits[-1] <= step):
            return False  # not starved now: whatever it was, its lead is its own (a straggler starved before its onset)
        if sum(1 for s in hits if step - c.starved_window < s <= step) >= c.starved_hits:
            return True
        starved = self.events.get_open(CPU_STARVED, job)
        return starved is not None and rank in starved.ranks

    def _excess(self, state: _State, step: int, rank: int, busy: float, busy_median: float) -> float | None:
        """How much longer `rank` waited on the run queue in `step` than the median rank would have in its place:
        the median run-queue wait scaled by the rank's *running* time (`busy`, its step less its wait, less its
        run-queue wait) over the median rank's (`busy_median` less the median run-queue wait), when over 1. On a
        host where every thread gets only part of a CPU a rank doing more CPU work (a real CPU-bound straggler)
        queues more in proportion: its absolute excess took ~(L - 1) / L of its lead at L threads per CPU (named
        at 6-20 steps instead of 2-3). Where the step's on-CPU times are known the rank's running time is at least
        its time on a CPU: the root's `busy` is the step's p50 less the rank's wait, not the rank's own step, and
        on a loaded host a CPU-bound straggler's busy less its run-queue wait read under half its CPU time (a live
        2x rank at 5 runnable threads per CPU: 0.045 s against 0.107 on a CPU), which took its lead for queueing
        (the median rank's is left as it was: raising it would discount more of any rank's lead, a sleeping
        straggler's too). Its running time, not its busy time: a descheduled rank's busy time holds
        the very wait that is discounted (scaling by it kept part of that lead; replayed, 10 false alarms in 3,150
        clean steps instead of 1). None where no discount can act: the step's run-queue waits unknown (none yet,
        a kernel that counts nothing, a row missing ranks) or the rank not among their exact top-k (it waited
        no longer than those)."""
        if not self.config.runqueue_discount:
            return None
        queued = state.queued.get(step)
        if queued is None:
            return None
        value = queued[1].get(rank)
        if value is None or not math.isfinite(value):
            return None  # outside the exact top-k: it waited no longer than those, and no discount acts
        median = _peer_queue(queued, rank)
        running, running_median = busy - value, busy_median - median
        cpu = state.oncpu.get(step)
        if cpu is not None:  # a thread runs at least as long as it is on a CPU
            running = max(running, cpu.by_rank.get(rank, cpu.median))
        ratio = running / running_median if running_median > 0 else 1.0
        return max(0.0, value - median * max(1.0, ratio))

    @staticmethod
    def _wait_scale(state: _State, step: int, s: Summary) -> float:
        """The length of the step the waits of `s` were measured in: its own step_time p50 (an earlier step's
        when its window has not come yet: windows of one step arrive in any order), and never less than the
        longest wait in it. Without that floor a whole-machine stall - one step 3-25x the usual, where every
        rank waited seconds - read as a gap several times the previous step, its evidence clipped to 1: a rank
        named on that one step (seen on clean fsdp2 and sync2 runs of bench/detection.py --matrix)."""
        return max(state.step_scales.get(step, state.step_scale), s.max if math.isfinite(s.max) else 0.0)

    def _waits(self, row: Row, state: _State) -> None:
        """One step of `collective_wait`: the least-waiting rank's evidence into the job's CUSUM; the event
        while a rank's score is at the threshold (wait_score.py)."""
        c, job, step, s = self.config, row.key.job, row.key.index, row.summary
        if not state.waits:
            state.waits = True
            state.last_step, state.warm = -1, 0  # judged on another signal until now: start again
            self._baseline.pop(job, None)
        if step <= state.last_step or s.count < 2 or not math.isfinite(s.min) or s.argmin is None:
            return
        if len(s.sources) < row.expected:
            return  # a rank without its wait could be the slow one
        self._keep_waits(state, step, s)
        score, median = self._score(state), peer_median(s, s.argmin)
        # The part of the least-waiting rank's lead its excess run-queue wait explains is no evidence: the rank
        # was ready to run and the host's CPUs were busy elsewhere (descheduled, not slow).
        scale = self._wait_scale(state, step, s) if state.step_scale > 0 else 0.0
        excess = self._excess(state, step, s.argmin, scale - s.min, scale - median)
        queued = excess or 0.0
        self._note_lead(state, step, s.argmin, median - s.min)
        gap = max(0.0, median - s.min - queued)
        # The fast lane's own threshold only on a step where the discount could act on the rank it judges: a
        # job that logs run-queue waits the discount cannot use (a kernel printing 0 0 0, a rank whose clock gave
        # up, a least-waiting rank outside the top-k of a world over 8, run-queue rows after the waits) keeps 0.8.
        score.lanes[0].threshold = c.runqueue_fast_threshold if excess is not None else c.wait_fast_threshold
        if state.warm < c.wait_warmup:
            state.warm += 1
            if scale > 0:
                score.observe(score.evidence(gap, scale), s.argmin)  # not judged; the job's level all the same
            return
        state.last_step = step
        if not scale > 0:
            return
        x = score.update(step, s.argmin, gap, scale, self._tied(s, median), s.count)
        slowdown = scale / max(scale - gap, 1e-9)
        figures = {"p50_s": fnum(median), "min_s": fnum(s.min), "step_s": fnum(scale),
                   "runqueue_excess_s": fnum(queued)}
        if self._shares_judge(state):
            # The running shares open, hold and close the event (_shares); a step's own waits open it when the
            # fast lane names the rank that waits least now (a severe straggler, before the averages move), and
            # add what the others waited for it. Until the shares have settled, the per-step waits below hold
            # and close an event as they do without shares: one opened on a blip must not stay open until then.
            # A step's waits hold an open event only while the rank's score is half a threshold, as the shares
            # do: a recovered rank of a 3-rank job still waits least on a third of the steps by chance, and each
            # such step held its event open (seen 20 steps after a 2x rank recovered, and on).
            # An open event whose rank no longer waits least hands over to the rank that does when that one is
            # named on its own score (_hand_over: a new severe straggler must not wait out the old event).
            open_now = self.is_open(job)
            if open_now and state.streak_group:
                # an event on ranks slowed alike: the running shares hold and close it; a rank named on its own
                # per-step score takes over (_hand_over)
                handed = self._hand_over(job, state, step, s.argmin)
                if handed is not None:
                    state.raw_held = step
                    self._judged(row, state, handed[0], handed[1], x, gap, slowdown, figures, count=True)
                return
            if open_now and s.argmin != state.streak_rank:
                handed = self._hand_over(job, state, step, s.argmin)
                if handed is None:
                    return
                state.raw_held = step
                self._judged(row, state, handed[0], handed[1], x, gap, slowdown, figures, count=True)
                return
            rank = state.streak_rank if open_now else (self._named(state, s.argmin) or (-1, 0.0))[0]
            if rank != s.argmin or score.ratio(rank) < (0.5 if open_now else 1.0):
                return
            state.raw_held = step
            self._judged(row, state, rank, score.ratio(rank), x, gap, slowdown, figures, count=True)
            return
        if self.is_open(job):
            # Hysteresis: an open event holds while its rank is still the least-waiting one and its score stays
            # above half a threshold (a slight straggler's score hovers around it: the event must not open and
            # close step after step); a step where another rank waits least counts towards closing, and
            # `wait_clear_steps` of them in a row close it (a recovered rank's score takes long to decay).
            held = score.ratio(state.streak_rank)
            named = (state.streak_rank, held) if held >= 0.5 and s.argmin == state.streak_rank else None
            if named is None:
                named = self._hand_over(job, state, step, s.argmin)
        else:
            # opened on a step where the rank makes the others wait, not on its past score; judged on its own
            # score (named(rank)), not hidden by a leader that does not qualify
            named = self._named(state, s.argmin)
        if named is None:
            self._normal(job, state, step, counts=True)
            return
        self._judged(row, state, named[0], named[1], x, gap, slowdown, figures, count=True)

    @staticmethod
    def _tied(s: Summary, median: float) -> set[int]:
        """The ranks other than the least-waiting one that waited closer to its wait than to the median rank's
        (from the exact bottom-k): they reached the step's collectives about as late (wait_score._extend_run)."""
        least = s.min
        return {rank for value, rank in s.bottom()
                if rank != s.argmin and value - least < (median - least) / 2}

    def _share_warmup(self) -> int:
        """Running-share steps of start-up: the job's first `wait_warmup` steps, and at least the averages' own
        settling (each rank's average starts at its first step's share: the first steps' gaps are the noise of
        one step, not of ~15)."""
        return max(self.config.wait_warmup, self.config.wait_share_settle)

    def _shares_judge(self, state: _State) -> bool:
        """The job's running shares have settled: they, not the per-step waits, hold and close its event."""
        return state.shares and state.share_warm >= self._share_warmup()

    def _score(self, state: _State) -> WaitScore:
        if state.score is None:
            c = self.config
            fast = c.wait_fast_threshold  # runqueue_fast_threshold on the steps the discount can act on (_waits)
            state.score = WaitScore(((c.wait_fast_drift, fast), (c.wait_drift, c.wait_threshold)),
                                    c.wait_cap, c.wait_track, c.wait_min_gap_s, background=c.wait_background,
                                    reference=c.wait_reference, running_drifts=(c.wait_share_drift,),
                                    running_margin=c.wait_share_margin, running_spread_k=c.wait_share_spread_k,
                                    fast_steps=c.wait_fast_steps)
        return state.score

    def _shares(self, row: Row, state: _State) -> None:
        """One step of the running wait shares (collectors/agent/wait_share.py): their exact argmin - the rank
        that waited least over its recent steps - and p50 - min into the slow and persistence lanes; the event
        opens when a lane names the rank that has the lowest share now, holds while it keeps it (and half a
        threshold), and closes after `wait_clear_steps` steps without (not counting steps whose own waits still
        held it)."""
        c, job, step, s = self.config, row.key.job, row.key.index, row.summary
        state.shares = True
        if step <= state.share_last or s.count < 2 or not math.isfinite(s.min) or s.argmin is None:
            return
        if len(s.sources) < row.expected:
            return  # a rank without its share could be the slow one
        score, median = self._score(state), peer_median(s, s.argmin)
        x = median - s.min
        # Start-up (_share_warmup): the last 8 of its steps give the level its first samples.
        warmup = self._share_warmup()
        if state.share_warm < warmup:
            state.share_warm += 1
            if state.share_warm > warmup - 8:
                score.observe_running(x)
            else:
                score.observe_running_start()
            return
        state.share_last = step
        x = score.update_running(step, s.argmin, x)
        state.share_gap = x
        group, group_x = tied_group(s)
        score.update_group(step, group, group_x)
        if group:
            state.group_pending[step] = group
            self._note_group(state, step)
        if self.is_open(job) and state.streak_group:
            self._shares_group(row, state, group, group_x)
            return
        if self.is_open(job):
            # Held while the rank keeps the lowest running share, half a threshold, and its gap has not fallen
            # under `wait_share_recovered` (0.6) of its level while held (the median of the event's last 16 held
            # steps' gaps): a rank that recovered keeps the lowest average for ~15 steps while it rejoins the
            # others', its gap falling by 1/8 a step (under 0.6 of its level in 4). Of the median, not of the
            # highest (0.75 of it before): the highest of a noisy average rises the longer the event lasts, and a
            # 1.1x rank of 16 still slow (its gap 0.054-0.095, its highest 0.095) lost its event 65-80 steps after
            # its onset, to be named again ~75 steps later (review; tests/test_straggler_cpu_work.py).
            held = score.ratio(state.streak_rank)
            least = s.argmin == state.streak_rank
            level = statistics.median(state.share_held) if state.share_held else 0.0
            named = ((state.streak_rank, held) if held >= 0.5 and least
                     and x >= c.wait_share_recovered * level else None)
            if named is not None:
                state.share_held.append(x)
        else:
            named = self._named(state, s.argmin)
            state.share_held.clear()
            if named is not None:
                state.share_held.append(x)
            elif (tied := score.group_named()) is not None and tied[0] == group:
                state.share_held.append(group_x)
                self._judged_group(row, state, group, tied[1], group_x, opening=True)
                return
        if named is None:
            self._normal(job, state, step, counts=state.raw_held < step - 1)
            return
        figures = {"p50_share": fnum(median, 4), "min_share": fnum(s.min, 4)}
        self._judged(row, state, named[0], named[1], x, None, 1.0 / max(1.0 - x, 1e-9), figures, count=False)

    def _shares_group(self, row: Row, state: _State, group: tuple[int, ...], x: float) -> None:
        """A running-share step while an event names ranks slowed alike: held while the step's tied group is still
        that group, its ratio half a threshold and its lead not fallen under `wait_share_recovered` of its level
        while held (as one rank's, `_shares`); towards closing otherwise."""
        c, job, step, score = self.config, row.key.job, row.key.index, self._score(state)
        ratio = score.group_ratio(state.streak_group)
        level = statistics.median(state.share_held) if state.share_held else 0.0
        if group == state.streak_group and ratio >= 0.5 and x >= c.wait_share_recovered * level:
            state.share_held.append(x)
            self._judged_group(row, state, group, ratio, x, opening=False)
            return
        self._normal(job, state, step, counts=True)

    def _judged_group(self, row: Row, state: _State, group: tuple[int, ...], value: float, x: float,
                      opening: bool) -> None:
        """Open or update the job's event naming the ranks slowed alike (`group`, tied_group), unless one of them
        is cpu_starved's (a host problem) or the group was descheduled (`_group_descheduled`: its run-queue wait over
        the other ranks' explains its lead). Not each rank's `_descheduled`: it weighs each least-waiting step's
        lead over the median rank, one of the group where the group is half the world (its lead the noise, its
        queueing all excess: two CPU-bound 1.1x ranks of three were left on every step)."""
        c, job, step, s = self.config, row.key.job, row.key.index, row.summary
        if self._group_descheduled(state, group, step, self._score(state).min_evidence) or any(
                self._left_to_cpu_starved(state, job, rank, step, descheduled=False) for rank in group):
            if not opening:
                self._normal(job, state, step, counts=True)
            return
        if opening:
            since = self._score(state).group_since(group)
            state.streak, state.start = 0, None
            self.over(state, step if since is None else since, event_time(row))
            state.streak_rank, state.streak_group = group[0], group
            state.wait_s_total = state.wait_rank_s_total = 0.0
            state.steps = 0
        else:
            self.over(state, step, event_time(row))
        open_event = self.events.get_open(self.kind, job)
        names = ", ".join(str(rank) for rank in group)
        detail = {
            "summary": (f"ranks {names} make the others wait alike: their running shares of steps spent waiting in "
                        f"collectives are {x:.0%} of a step under the other ranks' median; evidence {value:.2f}x "
                        "the threshold"),
            "signal": row.key.metric, "score": fnum(value, 4), "threshold": 1.0, "evidence": fnum(x, 4),
            "least_waiting_rank": s.argmin, "group": list(group), "slowdown": fnum(1.0 / max(1.0 - x, 1e-9), 3),
            "bottom": [[fnum(v), r] for v, r in s.bottom(c.top)],
            "wait_s": 0.0, "wait_rank_s": 0.0, "wait_s_total": fnum(state.wait_s_total),
            "wait_rank_s_total": fnum(state.wait_rank_s_total), "steps": state.steps,
            "detected_step": open_event.detail.get("detected_step") if open_event else step,
            "opened_on": open_event.detail.get("opened_on") if open_event else row.key.metric,
        }
        self.raise_streak(job, state, step, open_event, ranks=list(group), detail=detail, severity=c.severity)

    def _named(self, state: _State, rank: int) -> tuple[int, float] | None:
        """WaitScore.named(rank), except that a rank named by the running persistence lane alone (no other lane at
        its threshold) is named only where the step's own waits agree (`_waits_agree`)."""
        score = self._score(state)
        named = score.named(rank)
        if named is None or not score.by_running_persistence_alone(rank):
            return named
        return named if self._waits_agree(state, rank, score.min_evidence) else None

    @staticmethod
    def _waits_agree(state: _State, rank: int, least: float) -> bool:
        """Over the last 60 steps whose waits were exact, the rank's mean lead over the other ranks' median wait is
        `least` (min_evidence, 0.04: the per-step persistence lane's bar) of a step or more; fewer than 30 such steps
        (a world over 2k ranks, a job that started): true, judged as before. The running persistence lane counts how
        often a rank had the lowest running share (80 % of 60 steps) with a mean gap over the shares' own bar, which
        is low where the shares are tight (FSDP's ranks all wait ~75 % of a step): at three ranks a clean rank got
        there by chance, twice in the held-out sets (docs/detectors.md). A slight straggler leads the others on
        every step by about its slowdown (0.09 of a step at 1.1x)."""
        leads = [lead[rank] for lead in state.rank_leads if rank in lead]
        if len(leads) < 30:
            return True
        return statistics.fmean(leads) >= least

    def _hand_over(self, job: str, state: _State, step: int, least: int) -> tuple[int, float] | None:
        """The open event's rank no longer makes the others wait and the rank that waits least now is named on
        its own score: the event was about the wrong rank (a blip) or the culprit changed. Its event closes at
        once - waiting `wait_clear_steps` would hold the new culprit's event back by as many steps - and the
        new rank is named."""
        named = self._named(state, least)
        if named is None or named[0] == state.streak_rank:
            return None
        self.clear(job, step=step)
        self._forget(state, None)
        state.streak, state.start, state.clean = 0, None, 0
        return named

    def _normal(self, job: str, state: _State, step: int, counts: bool) -> None:
        """A step that does not name the open event's rank (towards closing it); when it closes, the rank's
        evidence is forgotten, and its running share's gap - once the shares judge: while they settle no gap was
        judged, and a 0 would leave the rank `quiet` for nothing - is watched while it falls."""
        was_open = self.is_open(job)
        self.normal(job, state, step, self.config.wait_clear_steps, counts=counts)
        if was_open and not self.is_open(job):
            self._forget(state, state.share_gap if self._shares_judge(state) else None)

    def _forget(self, state: _State, share_gap: float | None) -> None:
        """The closed event's evidence dropped: its rank's (`share_gap`: WaitScore.forget), or its group's."""
        if state.score is None:
            return
        if state.streak_group:
            state.score.forget_group(state.streak_group)
            state.streak_group = ()
        else:
            state.score.forget(state.streak_rank, share_gap)

    def _judged(self, row: Row, state: _State, rank: int, value: float, x: float, gap: float | None,
                slowdown: float, figures: dict, count: bool) -> None:
        """Open or update the job's event naming `rank` (score `value`, this step's evidence `x`): `gap` is what
        the median rank waited for it this step (per-step waits; None on the running shares), counted into the
        event's totals when `count`."""
        c, job, step, s = self.config, row.key.job, row.key.index, row.summary
        if self._left_to_cpu_starved(state, job, rank, step):
            if self.is_open(job) and state.streak_rank == rank:
                self._normal(job, state, step, counts=count)  # starved now: towards closing, not held
            return
        score = self._score(state)
        since = score.since(rank)
        if self.over(state, step if since is None else since, event_time(row)):
            state.streak_rank = rank
            state.streak_group = ()
            if not self.is_open(job):
                state.wait_s_total = state.wait_rank_s_total = 0.0
                state.steps = 0
        least = s.argmin == rank
        wait_s = gap if gap is not None and least else 0.0
        wait_rank_s = max(0.0, s.sum - s.count * s.min) if gap is not None and least else 0.0
        if count:
            state.wait_s_total += wait_s
            state.wait_rank_s_total += wait_rank_s
            state.steps += int(least)  # the steps it made the others wait (the totals' count)
        open_event = self.events.get_open(self.kind, job)
        if gap is None:
            summary = (f"rank {rank} makes the others wait: its running share of steps spent waiting in "
                       f"collectives is {x:.0%} of a step under the median rank's; evidence {value:.2f}x the "
                       "threshold")
        else:
            summary = (f"rank {rank} makes the others wait: the median rank waited {wait_s:.3g} s longer in "
                       f"collectives this step ({x:.0%} of the step); evidence {value:.2f}x the threshold")
        detail = {
            "summary": summary, "signal": row.key.metric, "score": fnum(value, 4), "threshold": 1.0,
            "evidence": fnum(x, 4), "least_waiting_rank": s.argmin,
            "slowdown": fnum(slowdown, 3) if least else None, **figures,
            "bottom": [[fnum(v), r] for v, r in s.bottom(c.top)],
            "wait_s": fnum(wait_s), "wait_rank_s": fnum(wait_rank_s),
            "wait_s_total": fnum(state.wait_s_total), "wait_rank_s_total": fnum(state.wait_rank_s_total),
            "steps": state.steps, "detected_step": open_event.detail.get("detected_step") if open_event else step,
            # the signal whose step opened the event (`signal` is the latest update's)
            "opened_on": open_event.detail.get("opened_on") if open_event else row.key.metric,
        }
        self.raise_streak(job, state, step, open_event, ranks=[rank], detail=detail, severity=c.severity)

    def _step_time(self, s: Summary, baseline: Baseline) -> _Judged | None:
        c, median, slowest = self.config, p50(s), s.argmax
        if not median > 0 or slowest is None:
            return None
        ratio = s.max / median
        threshold = c.factor
        if len(baseline) >= c.min_baseline:
            threshold = max(c.factor, c.baseline_factor * baseline.median())
        return _Judged(ratio > threshold, ratio, threshold, threshold * median, s.max - median, median, slowest)

    def _arrival(self, s: Summary, state: _State, job: str) -> _Judged | None:
        """A rank is over on a step when it arrives a large share of the step after the median rank (and over
        `min_wait_s`); the step counts as over when the same rank was over on at least `persist_k` of the last
        `persist_n` steps: a rank that is late step after step, not one the OS scheduler held back now and
        then."""
        c, median, slowest = self.config, p50(s), s.argmax
        scale = max(state.step_scale, s.max)
        if not (scale > 0 and math.isfinite(median)) or slowest is None:
            return None
        cut = median + max(c.min_wait_frac * scale, c.min_wait_s)
        late = [rank for value, rank in s.top(c.top) if value > cut]
        recent = self._recent.setdefault(job, deque(maxlen=c.persist_n))
        recent.append(frozenset(late))
        counts = {rank: sum(rank in step for step in recent) for rank in late}
        persistent = sorted((r for r in late if counts[r] >= c.persist_k), key=lambda r: -counts[r])
        lag = max(0.0, s.max - median)
        culprit = persistent[0] if persistent else slowest
        began = next((len(recent) - 1 - i for i, ranks in enumerate(recent) if culprit in ranks), 0)
        return _Judged(bool(persistent), lag / scale, c.min_wait_frac, cut, lag, median, culprit, persistent or None,
                       began)
