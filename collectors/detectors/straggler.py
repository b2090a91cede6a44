"""Straggler: the rank that makes the others wait, named per step with the wait it costs.

Two signals, chosen per job:

* `collective_arrival` (logged by the SDK itself under torch.distributed; see
  telemetry.torch.collective.ArrivalClock): per rank, the seconds from its previous step exit to its last
  collective of the step. Under synchronous collectives every rank's wall `step_time` is the slowest
  rank's, so only the arrival can name it: `argmax` arrived last and `lag` = max - p50 is how long the
  median rank waited for it. A step is over when the median rank's wait is a large share of the step,
  `lag / scale` > max(`min_wait_frac`, the run's usual share + `mad_k` robust sigmas), where `scale` =
  max(step_time p50, arrival max), and the wait is over `min_wait_s` (below it, a wait is the OS
  scheduler's noise on a shared host). Only steps where every rank reported an arrival are judged (a rank
  without one could be the slow one). Once a job logs arrivals, its `step_time` is not judged.
* `step_time`, for jobs without collectives (each rank's wall time is its own): over when max / p50 >
  max(`factor`, `baseline_factor` x the run's median ratio over its last `baseline_steps` normal steps),
  so a job whose ranks are always a little uneven does not cry wolf.

The first `warmup` steps of either signal are start-up (first iterations, allocator, compilation, DDP
building its buckets) and are not judged. Noise does not make a straggler: an event opens after `consecutive` over steps in a row whose slowest
rank is the *same* rank (a rank descheduled once, or a different rank each step, is not one), is
updated every over step, and closes after `clear_steps` normal ones. Its `step` is the first over step.
The detail names the top ranks above the threshold and the seconds they cost: `wait_s` = max - p50 (the
median rank's wait) and `wait_rank_s` = count x max - sum (every rank's waiting, summed), per step and
in total over the event.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from collectors.detectors.base import Baseline, Detector, distinct, event_time, fnum, mad_sigma, p50
from collectors.root.store import Row
from telemetry.summary import Summary

ARRIVAL = "collective_arrival"


@dataclass
class StragglerConfig:
    enabled: bool = True
    metric: str = "step_time"
    arrival_metric: str = ARRIVAL
    factor: float = 1.5
    min_wait_frac: float = 0.25
    min_wait_s: float = 0.02
    warmup: int = 5
    mad_k: float = 6.0
    consecutive: int = 2
    clear_steps: int = 2
    baseline_steps: int = 50
    baseline_factor: float = 1.25
    min_baseline: int = 5
    top: int = 5
    severity: str = "warning"


@dataclass
class _State:
    streak: int = 0
    streak_start: int | None = None
    streak_rank: int = -1
    streak_time: float = 0.0
    clean: int = 0
    last_step: int = -1
    wait_s_total: float = 0.0
    wait_rank_s_total: float = 0.0
    steps: int = 0
    arrivals: bool = False    # the job logs collective_arrival: judge that, not step_time
    warm: int = 0             # steps seen (the first `warmup` are start-up, not judged)
    step_scale: float = 0.0   # the last step_time p50 seen


@dataclass
class _Judged:
    over: bool
    measure: float      # ratio (step_time) or share of the step waited (arrival)
    threshold: float
    cut: float          # values above it are named
    wait_s: float
    median: float


class StragglerDetector(Detector):
    kind = "straggler"

    def __init__(self, events, context=None, config: StragglerConfig | None = None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(events, context)
        self.config = config or StragglerConfig()
        self.metrics = frozenset({self.config.metric, self.config.arrival_metric})
        self._state: dict[str, _State] = {}
        self._baseline: dict[str, Baseline] = {}

    def observe(self, row: Row) -> None:
        if row.late or not row.key.is_step:
            return
        c, job, step, s = self.config, row.key.job, row.key.index, row.summary
        state = self._state.setdefault(job, _State())
        arrival = row.key.metric == c.arrival_metric
        if not arrival:
            median = p50(s)
            if median > 0 and math.isfinite(median):
                state.step_scale = median
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
        baseline = self._baseline.setdefault(job, Baseline(c.baseline_steps))
        judged = self._arrival(s, state, baseline) if arrival else self._step_time(s, baseline)
        if judged is None:
            return
        state.last_step = step
        if not judged.over:
            baseline.add(judged.measure)
            state.streak, state.streak_start = 0, None
            state.clean += 1
            if state.clean >= c.clear_steps and self.is_open(job):
                self.clear(job, step=step)
            return
        state.clean = 0
        if state.streak and s.argmax != state.streak_rank and not self.is_open(job):
            state.streak = 0  # a different rank each step is noise, not a straggler
        if state.streak == 0:
            state.streak_start, state.streak_time, state.streak_rank = step, event_time(row), s.argmax
            if not self.is_open(job):
                state.wait_s_total = state.wait_rank_s_total = 0.0
                state.steps = 0
        state.streak += 1
        wait_rank_s = max(0.0, s.count * s.max - s.sum)
        state.wait_s_total += judged.wait_s
        state.wait_rank_s_total += wait_rank_s
        state.steps += 1
        if state.streak < c.consecutive and not self.is_open(job):
            return
        ranks = distinct(s.top(), lambda v: v > judged.cut, c.top) or [s.argmax]
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
        self.raise_(job, step=state.streak_start if open_event is None else step, ranks=ranks, detail=detail,
                    severity=c.severity, time=state.streak_time)

    def _step_time(self, s: Summary, baseline: Baseline) -> _Judged | None:
        c, median = self.config, p50(s)
        if not median > 0:
            return None
        ratio = s.max / median
        threshold = c.factor
        if len(baseline) >= c.min_baseline:
            threshold = max(c.factor, c.baseline_factor * baseline.median())
        return _Judged(ratio > threshold, ratio, threshold, threshold * median, s.max - median, median)

    def _arrival(self, s: Summary, state: _State, baseline: Baseline) -> _Judged | None:
        c, median = self.config, p50(s)
        scale = max(state.step_scale, s.max)
        if not (scale > 0 and math.isfinite(median)):
            return None
        lag = max(0.0, s.max - median)
        share = lag / scale
        threshold = c.min_wait_frac
        if len(baseline) >= c.min_baseline:
            threshold = max(threshold, baseline.median() + c.mad_k * mad_sigma(baseline.values))
        over = share > threshold and lag > c.min_wait_s
        return _Judged(over, share, threshold, median + threshold * scale, lag, median)
