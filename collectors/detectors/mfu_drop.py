"""MFU drop: model FLOPs utilisation down against the run's own baseline, named sooner the deeper it is.

The job's MFU per step is the mean over ranks. The first `warmup` steps are left out (a job's first steps are
slow: allocator, DDP's bucket rebuild, caches); the baseline is the median of the last `baseline_steps` normal
steps after them (at least `min_baseline` of them before anything is judged), its spread the robust sigma
(1.4826 x MAD) of those steps, as a share of the median (at least `min_sigma`).

Each judged step's evidence is its relative drop below the baseline, less `noise_k` robust sigmas:

    e = (baseline - mfu) / baseline - noise_k x sigma / baseline

so a job whose MFU is noisy step to step (a shared host: 30 % swings) must drop further than its own spread
before anything accumulates, and a steady job is held to a few percent. The evidence feeds a CUSUM with two
lanes (collectors/detectors/cusum.py, `lanes` = [[drift, threshold], ...]): the fast lane (0.15, 0.6) names a
drop of 75 % in one step and of 50 % in two or three and ignores anything under ~15 % + the noise allowance;
the slow lane (0.04, 1.2) sums a small drop: 30 % in ~5 steps, 15 % in ~15, 10 % in ~40 on a steady job (the
measured matrix: tests/test_drop_rules.py, docs/detectors.md). A drop under `drift` of the slow lane beyond
the noise allowance (about 4 % + 3 sigma) is never named. The event's step is where the leading lane's score
left zero (the CUSUM's onset), `detail.detected_step` the step it was named at.

Only steps within the noise allowance (mfu >= baseline x (1 - noise_k x sigma)) join the baseline, so a
drop never becomes the new normal while it accumulates. The event closes after `clear_steps` such steps in a
row (its lanes then start from zero). Names the ranks below the slow lane's line among the bottom-k
(Summary.bottom) when the drop is on a few ranks; none when all dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from collectors.common.rows import Row
from collectors.detectors.base import Baseline, Detector, distinct, event_time, fnum
from collectors.detectors.cusum import Cusum, lane_name, tail_sigma


@dataclass
class MfuDropConfig:
    enabled: bool = True
    metric: str = "mfu"
    lanes: list[list[float]] = field(default_factory=lambda: [[0.15, 0.6], [0.04, 1.2]])
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
    baseline: Baseline
    seen: int = 0          # steps seen (the first `warmup` are start-up, not judged)
    last_step: int = -1    # each step is judged once, in order
    clean: int = 0         # steps back within the noise allowance in a row


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
            lanes = tuple((float(d), float(t)) for d, t in c.lanes)
            found = self._jobs[job] = _Job(Cusum(lanes, c.cap), Baseline(c.baseline_steps))
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
        value, baseline = s.mean, state.baseline
        if len(baseline) < c.min_baseline:
            baseline.add(value)
            return
        ref = baseline.median()
        if not ref > 0:
            baseline.add(value)
            return
        sigma = max(tail_sigma(baseline.values, upper=False) / ref, c.min_sigma)  # relative, its low side
        allowance = c.noise_k * sigma
        drop = 1.0 - value / ref
        evidence = min(drop, 1.0) - allowance
        state.cusum.update(step, evidence, event_time(row))
        lane_index, lane = state.cusum.leading()
        within = drop <= allowance
        if within:
            baseline.add(value)
        event = self.events.get_open(self.kind, job)
        if event is None:
            if lane.ratio >= 1.0:
                self._raise(job, step, row, state, ref, sigma, drop, lane_index, None)
            return
        if within:
            state.clean += 1
            if state.clean >= c.clear_steps:
                state.cusum.reset()
                state.clean = 0
                self.clear(job, step=step)
            return
        state.clean = 0
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
