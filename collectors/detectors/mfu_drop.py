"""MFU drop: model FLOPs utilisation down against the run's own baseline, named sooner the deeper it is.

The job's MFU per step is the mean over ranks. The first `warmup` steps are left out (a job's first steps are
slow: allocator, DDP's bucket rebuild, caches). The level is the median of the last `baseline_steps` steps within
the noise allowance (at least `min_baseline` of them before anything is judged); the spread sigma is the robust
spread of the low side ((p50 - p10) / 1.2816, as a share of the level, at least `min_sigma`) of *every* one of the
last `baseline_steps` steps but those a lane is summing now: a shared host's one-step dips are the job's noise,
and a baseline that left them out judged them against a spread they were never part of (8 false alarms in a
real 1,000-step clean job on this machine; 0 since, in three).

Each judged step's evidence is its relative drop beyond `noise_k` sigmas:

    e = (level - mfu) / level - noise_k x sigma

and feeds a CUSUM with two lanes (collectors/detectors/cusum.py, `lanes` = [[drift, threshold, clip], ...]),
each step counting at most `clip`: the fast lane (0.15, 1.5, 0.6) names a drop of 75 % in four steps and of 50 %
in five (one wild step, or three steps of 50 % on a busy host, cannot reach it), the slow lane (0.04, 1.2, 0.3)
sums a small one: 30 % in ~6 steps, 20 % in ~9, 10 % in ~30-45 on a steady job (tests/test_drop_rules.py,
docs/detectors.md). A drop under the slow lane's drift beyond the allowance is never named. The event's step is
where the leading lane's score left zero (the CUSUM's onset), `detail.detected_step` the step it was named at.

The event closes after `clear_steps` steps within the allowance in a row (its lanes then start from zero). Names
the ranks below the slow lane's line among the bottom-k (Summary.bottom) when the drop is on a few ranks; none
when all dropped.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from collectors.common.rows import Row
from collectors.detectors.base import Baseline, Detector, distinct, event_time, fnum
from collectors.detectors.cusum import Cusum, lane_name, tail_sigma


@dataclass
class MfuDropConfig:
    enabled: bool = True
    metric: str = "mfu"
    lanes: list[list[float]] = field(default_factory=lambda: [[0.15, 1.5, 0.6], [0.04, 1.2, 0.3]])
    noise_k: float = 2.5
    min_sigma: float = 0.005
    cap: float = 2.0
    clear_steps: int = 3
    baseline_steps: int = 50
    min_baseline: int = 10
    warmup: int = 5
    top: int = 5
    severity: str = "warning"


@dataclass
class _Job:
    cusum: Cusum
    window: deque[tuple[int, float]]  # (step, mean MFU) of the last baseline_steps steps: the spread's, dips too
    baseline: Baseline                # the last baseline_steps steps within the allowance: the level's
    seen: int = 0          # steps seen (the first `warmup` are start-up, not judged)
    last_step: int = -1    # each step is judged once, in order


class MfuDropDetector(Detector):
    kind = "mfu_drop"

    def __init__(self, events, context=None, config: MfuDropConfig | None = None) -> None:
        super().__init__(events, context)
        self.config = config or MfuDropConfig()
        self.metrics = frozenset({self.config.metric})
        self._jobs: dict[str, _Job] = {}

    def _job(self, job: str) -> _Job:
        found = self._jobs.get(job)
        if found is None:
            c = self.config
            found = self._jobs[job] = _Job(Cusum(c.lanes, c.cap), deque(maxlen=c.baseline_steps),
                                           Baseline(c.baseline_steps))
        return found

    def observe(self, row: Row) -> None:
        if row.late or not row.key.is_step:
            return
        c, job, step, s = self.config, row.key.job, row.key.index, row.summary
        state = self._job(job)
        if step <= state.last_step or not s.count or not math.isfinite(s.mean):
            return
        state.last_step = step
        state.seen += 1
        if state.seen <= c.warmup:
            return
        value, window, baseline = s.mean, state.window, state.baseline
        event = self.events.get_open(self.kind, job)
        # The spread: every step of the window before the lanes' pending onset (a drop being summed is not noise)
        pending = [lane.since for lane in state.cusum.lanes if lane.score > 0 and lane.since is not None]
        usable = [v for at, v in window if not pending or at < min(pending)]
        ref = baseline.median() if len(baseline) >= c.min_baseline else math.nan
        if not ref > 0:
            if event is None:
                window.append((step, value))
                baseline.add(value)
            return
        sigma = max(tail_sigma(usable, upper=False) / ref, c.min_sigma)  # relative, its low side
        allowance = c.noise_k * sigma
        drop = 1.0 - value / ref
        evidence = min(drop, 1.0) - allowance
        state.cusum.update(step, evidence, event_time(row))
        lane_index, lane = state.cusum.leading()
        within = drop <= allowance
        if within:
            baseline.add(value)  # the level: only steps within the allowance (a slow slide never becomes it)
        if event is None:
            window.append((step, value))  # every step, dips too: they are the job's noise, unless summed to a drop
            if lane.ratio >= 1.0:
                onset = lane.since if lane.since is not None else step
                state.window = deque(((at, v) for at, v in window if at < onset), maxlen=c.baseline_steps)
                self._raise(job, step, row, state, ref, sigma, drop, lane_index, None)
            return
        if within:
            window.append((step, value))  # back to normal while the event is open
            if state.cusum.calm(c.clear_steps):
                self.clear(job, step=step)
            return
        state.cusum.stir()
        if evidence > 0:
            self._raise(job, step, row, state, ref, sigma, drop, lane_index, event)

    def _raise(self, job: str, step: int, row: Row, state: _Job, ref: float, sigma: float, drop: float,
               lane_index: int, event: Any) -> None:
        c, s = self.config, row.summary
        lane = state.cusum.lanes[lane_index]
        line = ref * (1.0 - c.noise_k * sigma - float(c.lanes[-1][0]))  # under it a step is evidence to every lane
        ranks = [] if s.max < line else distinct(s.bottom(), lambda v: v < line, c.top)
        onset = lane.since if lane.since is not None else step
        if event is not None:
            onset = event.detail.get("onset_step", onset)
        detail: dict[str, Any] = {
            "summary": f"MFU {s.mean:.3g} vs baseline {ref:.3g} ({drop:.0%} lower) since step {onset}",
            "mfu": fnum(s.mean), "baseline": fnum(ref), "baseline_sigma": fnum(sigma * ref),
            "relative_drop": fnum(drop, 4), "threshold": fnum(line), "rule": "cusum",
            "lane": lane_name(lane_index, len(c.lanes)),
            "score_ratio": fnum(lane.ratio, 3), "onset_step": onset, "min": fnum(s.min), "argmin": s.argmin,
        }
        if event is None:
            detail.update(detected_step=step, delay_steps=step - onset, opened_by_lane=detail["lane"])
            self.raise_(job, step=onset, ranks=ranks, detail=detail, severity=c.severity, time=lane.since_time)
        else:
            detail.update({name: event.detail.get(name) for name in ("detected_step", "delay_steps", "opened_by_lane")})
            self.raise_(job, step=step, ranks=ranks, detail=detail, severity=c.severity)
