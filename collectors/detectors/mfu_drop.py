"""MFU drop: model FLOPs utilisation down against the run's own baseline, and staying down.

The job's MFU per step is the mean over ranks. The first `warmup` steps are left out (a job's first
steps are slow: allocator, DDP's bucket rebuild, caches); the baseline is the median of the last
`baseline_steps` normal steps after them (at least `min_baseline` of them before anything is judged),
and its spread the robust sigma (1.4826 x MAD) of those steps.

- step change (default): MFU below the threshold for `sustain` consecutive steps (40); the threshold is
  the lower of (1 - drop) x baseline (10 %) and baseline - k x sigma. A job whose MFU is noisy step to
  step runs where its level also wanders for tens of steps (a shared host's load: bench/detection.py saw
  40-60 % swings on clean runs), so it must drop further than its own spread before it is called a drop;
  a steady job is held to the 10 %. And it must stay down longer than such a swing: replaying the
  recorded runs (bench/detection_jobs/replay.py), a loaded 2-core machine held clean runs' MFU under the
  threshold for up to 31 consecutive steps (sustain = 20 raised 5 false alarms in three full runs), a
  slow rank for the rest of the run. k and `sustain` are set from the bench's figures (docs/detectors.md).
  The event's step is the first of the low steps;
- slope (off unless `slope_window` > 0): the least-squares line through the last `slope_window` steps
  loses more than `drop` x baseline over that window.

Closes after `clear_steps` steps back above halfway from the threshold to the baseline ((1 - drop / 2) x
baseline for a steady job); only such steps join the baseline. Names the ranks below the
threshold among the bottom-k (Summary.bottom) when the drop is on a few ranks; none when all dropped.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from collectors.common.rows import Row
from collectors.detectors.base import distinct, event_time, fnum
from collectors.detectors.streak import StreakDetector, StreakState


@dataclass
class MfuDropConfig:
    enabled: bool = True
    metric: str = "mfu"
    drop: float = 0.10
    k: float = 2.0
    sustain: int = 40
    clear_steps: int = 3
    baseline_steps: int = 50
    min_baseline: int = 10
    warmup: int = 5
    slope_window: int = 0
    top: int = 5
    severity: str = "warning"


@dataclass
class _State(StreakState):
    seen: int = 0             # steps seen (the first `warmup` are start-up, not judged)
    values: deque | None = None


def _slope(points: list[tuple[int, float]]) -> float:
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx == 0:
        return 0.0
    return sum((p[0] - mx) * (p[1] - my) for p in points) / sxx


class MfuDropDetector(StreakDetector[_State]):
    kind = "mfu_drop"

    def __init__(self, events, context=None,
                 config: MfuDropConfig | None = None) -> None:
        self.config = config or MfuDropConfig()
        super().__init__(events, context, self.config.baseline_steps)
        self.metrics = frozenset({self.config.metric})

    def new_state(self) -> _State:
        return _State(values=deque(maxlen=max(2, self.config.slope_window)))

    def observe(self, row: Row) -> None:
        if row.late or not row.key.is_step:
            return
        c, job, step, s = self.config, row.key.job, row.key.index, row.summary
        state = self.state(job)
        if step <= state.last_step or not s.count or not math.isfinite(s.mean):
            return
        state.last_step = step
        state.seen += 1
        if state.seen <= c.warmup:
            return
        value = s.mean
        baseline = self.baseline(job)
        assert state.values is not None
        state.values.append((step, value))
        if len(baseline) < c.min_baseline:
            baseline.add(value)
            return
        ref = baseline.median()
        if not ref > 0:
            baseline.add(value)
            return
        sigma = baseline.mad_sigma()
        threshold = min((1.0 - c.drop) * ref, ref - c.k * sigma)
        low = value < threshold
        rule = "step_change"
        slope_loss = None
        if not low and c.slope_window and len(state.values) >= c.slope_window:
            slope_loss = -_slope(list(state.values)) * (c.slope_window - 1)
            if slope_loss > c.drop * ref:
                low, rule = True, "slope"
        if not low:
            recovered = value >= (ref + threshold) / 2  # back above halfway: normal again
            if recovered:
                baseline.add(value)
            self.normal(job, state, step, c.clear_steps, counts=recovered)
            return
        self.over(state, step, event_time(row))
        if not self.due(job, state, c.sustain if rule == "step_change" else 1):
            return
        drop = 1.0 - value / ref
        ranks = [] if s.max < threshold else distinct(s.bottom(), lambda v: v < threshold, c.top)
        event = self.events.get_open(self.kind, job)
        detail = {
            "summary": f"MFU {value:.3g} vs baseline {ref:.3g} ({drop:.0%} lower) for {state.streak} steps",
            "mfu": fnum(value), "baseline": fnum(ref), "baseline_sigma": fnum(sigma), "relative_drop": fnum(drop, 4),
            "threshold": fnum(threshold),
            "rule": rule, "steps": state.streak, "min": fnum(s.min), "argmin": s.argmin,
            "slope_loss": fnum(slope_loss) if slope_loss is not None else None,
            "opened_by": event.detail.get("opened_by", rule) if event is not None else rule,
        }
        self.raise_streak(job, state, step, event, ranks=ranks, detail=detail, severity=c.severity)
