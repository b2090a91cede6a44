"""Straggler: the slowest rank's step time far above the median for K consecutive steps.

Per finalised `step_time` window: ratio = max / p50. Over when ratio > max(factor, baseline_factor x
the run's median ratio over its last `baseline_steps` normal steps) - so a job whose ranks are always
a little uneven does not cry wolf, and a fixed factor still catches a straggler present from step 1.
Raised after `consecutive` over steps (its `step` is the first of them), updated every over step,
closed after `clear_steps` normal ones.

Names the top ranks (Summary.top, exact) above the threshold and the collective-wait seconds they
cost: `wait_s` = max - p50 (the seconds the median rank waits at the next collective) and
`wait_rank_s` = count x max - sum (the waiting of every rank, summed over the job), per step and in
total over the event.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from collectors.detectors.base import Baseline, Detector, distinct, event_time, fnum, p50
from collectors.root.store import Row


@dataclass
class StragglerConfig:
    enabled: bool = True
    metric: str = "step_time"
    factor: float = 1.5
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
    streak_time: float = 0.0
    clean: int = 0
    last_step: int = -1
    wait_s_total: float = 0.0
    wait_rank_s_total: float = 0.0
    steps: int = 0


class StragglerDetector(Detector):
    kind = "straggler"

    def __init__(self, events, context=None, config: StragglerConfig | None = None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(events, context)
        self.config = config or StragglerConfig()
        self.metrics = frozenset({self.config.metric})
        self._state: dict[str, _State] = {}
        self._baseline: dict[str, Baseline] = {}

    def observe(self, row: Row) -> None:
        if row.late or not row.key.is_step:
            return
        c, job, step, s = self.config, row.key.job, row.key.index, row.summary
        state = self._state.setdefault(job, _State())
        if step <= state.last_step or s.count < 2:
            return
        state.last_step = step
        median = p50(s)
        if not (median > 0 and math.isfinite(s.max)):
            return
        ratio = s.max / median
        baseline = self._baseline.setdefault(job, Baseline(c.baseline_steps))
        threshold = c.factor
        if len(baseline) >= c.min_baseline:
            threshold = max(c.factor, c.baseline_factor * baseline.median())
        if ratio <= threshold:
            baseline.add(ratio)
            state.streak, state.streak_start = 0, None
            state.clean += 1
            if state.clean >= c.clear_steps and self.is_open(job):
                self.clear(job, step=step)
            return
        state.clean = 0
        if state.streak == 0:
            state.streak_start, state.streak_time = step, event_time(row)
            if not self.is_open(job):
                state.wait_s_total = state.wait_rank_s_total = 0.0
                state.steps = 0
        state.streak += 1
        wait_s = s.max - median
        wait_rank_s = max(0.0, s.count * s.max - s.sum)
        state.wait_s_total += wait_s
        state.wait_rank_s_total += wait_rank_s
        state.steps += 1
        if state.streak < c.consecutive and not self.is_open(job):
            return
        cut = threshold * median
        ranks = distinct(s.top(), lambda v: v > cut, c.top) or [s.argmax]
        open_event = self.events.get_open(self.kind, job)
        detail = {
            "summary": f"rank {ranks[0]} at {s.max:.3g} s vs median {median:.3g} s ({ratio:.2f}x); "
                       f"ranks wait {wait_s:.3g} s per step",
            "ratio": fnum(ratio, 4), "threshold": fnum(threshold, 4), "p50_s": fnum(median),
            "max_s": fnum(s.max), "slowest_rank": s.argmax,
            "top": [[fnum(v), r] for v, r in s.top(c.top)],
            "wait_s": fnum(wait_s), "wait_rank_s": fnum(wait_rank_s),
            "wait_s_total": fnum(state.wait_s_total), "wait_rank_s_total": fnum(state.wait_rank_s_total),
            "steps": state.steps, "detected_step": open_event.detail.get("detected_step") if open_event else step,
            "baseline_ratio": fnum(baseline.median(), 4) if len(baseline) else None,
        }
        self.raise_(job, step=state.streak_start if open_event is None else step, ranks=ranks, detail=detail,
                    severity=c.severity, time=state.streak_time)
