"""Data-loader stall: ranks waiting on their input pipeline for a share of the step, named sooner the larger it is.

Pairs each step's `dataloader_wait` and `step_time` windows (whichever is finalised second triggers the
check). The fraction is the worst rank's wait over the median step time (in a synchronous job one rank waiting
on data holds every rank back). The run's baseline is the median fraction of its last `baseline_steps` normal
steps (once it has `min_baseline`), its spread their robust sigma (1.4826 x MAD, at least `min_sigma`). Each
step's evidence is the fraction above the baseline less `noise_k` sigmas:

    e = fraction - baseline - noise_k x sigma     (0 when the wait is under `min_wait_s`)

`min_wait_s` (3 ms): shorter waits are the host's scheduling and the SDK's own thread holding the GIL, not an
input pipeline (bench/detection.py saw 3-step bursts of 1.2-1.8 ms in 4 ms steps of clean runs, and its slow
loaders waited 4.9 ms and more). The evidence feeds a CUSUM with two lanes (collectors/detectors/cusum.py,
`lanes` = [[drift, threshold], ...]): the fast lane (0.2, 0.5) names a rank waiting 90 % of the step at once
and 50 % in two steps and ignores a one-step blip; the slow lane (0.05, 0.6) sums smaller stalls: 30 % of the
step in ~3 steps, 15 % in ~8, 10 % in ~15-25 (the measured matrix: tests/test_drop_rules.py). The event's step
is the leading lane's onset; it closes after `clear_steps` steps with no evidence in a row (its lanes then
start from zero). Names the ranks whose wait is above the baseline's allowance (top-k); while the event is
open the ranks named accumulate.

One long stall is raised at once: a wait of at least `stall_steps` median step times and `stall_min_s`
seconds (a loader blocked for seconds is not noise). That wait often reaches the root as a late delta: with
the README's loop the wait before step s is logged while step s - 1 is current, and a rank whose loader blocks
has already closed s - 1, so the value arrives after the window was finalised. Late deltas of
`dataloader_wait` are therefore judged by this rule (against the job's recent median step time), and only by
it.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from collectors.common.rows import Row
from collectors.detectors.base import Baseline, Detector, distinct, event_time, fnum, p50
from collectors.detectors.cusum import Cusum, lane_name, tail_sigma
from telemetry.summary import Summary


@dataclass
class DataloaderStallConfig:
    enabled: bool = True
    metric: str = "dataloader_wait"
    step_metric: str = "step_time"
    fraction: float = 0.25
    lanes: list[list[float]] = field(default_factory=lambda: [[0.2, 0.5], [0.05, 0.6]])
    noise_k: float = 2.5
    min_sigma: float = 0.01
    cap: float = 2.0
    clear_steps: int = 2
    baseline_steps: int = 50
    min_baseline: int = 5
    stall_steps: float = 20.0
    stall_min_s: float = 1.0
    min_wait_s: float = 0.003
    top: int = 5
    severity: str = "warning"


@dataclass
class _Job:
    cusum: Cusum
    baseline: Baseline
    last_step: int = -1   # each step is judged once, in order
    start: int | None = None  # a long stall's step when it opened the event
    start_time: float = 0.0


class DataloaderStallDetector(Detector):
    kind = "dataloader_stall"

    def __init__(self, events, context=None, config: DataloaderStallConfig | None = None) -> None:
        super().__init__(events, context)
        self.config = config or DataloaderStallConfig()
        self.metrics = frozenset({self.config.metric, self.config.step_metric})
        self._pending: dict[str, OrderedDict[int, dict[str, Row]]] = {}
        self._step_p50: dict[str, Baseline] = {}
        self._jobs: dict[str, _Job] = {}

    def _job(self, job: str) -> _Job:
        found = self._jobs.get(job)
        if found is None:
            c = self.config
            found = self._jobs[job] = _Job(Cusum(c.lanes, c.cap), Baseline(c.baseline_steps))
        return found

    def observe(self, row: Row) -> None:
        if not row.key.is_step:
            return
        if row.late:
            if row.key.metric == self.config.metric:
                self._judge_late(row)
            return
        job, step = row.key.job, row.key.index
        if row.key.metric == self.config.step_metric:
            self._step_p50.setdefault(job, Baseline(self.config.baseline_steps)).add(p50(row.summary))
        pending = self._pending.setdefault(job, OrderedDict())
        pair = pending.setdefault(step, {})
        pair[row.key.metric] = row
        while len(pending) > 64:
            pending.popitem(last=False)
        if len(pair) < 2:
            return
        del pending[step]
        self._judge(job, step, pair[self.config.metric], pair[self.config.step_metric].summary)

    def _judge(self, job: str, step: int, wait_row: Row, step_time: Summary) -> None:
        c, wait = self.config, wait_row.summary
        state = self._job(job)
        if step <= state.last_step or not wait.count or not step_time.count:
            return
        state.last_step = step
        median_step = p50(step_time)
        if not (median_step > 0 and math.isfinite(wait.max)):
            return
        frac = min(wait.max / median_step, 1.0)
        baseline = state.baseline
        allowance = c.fraction  # the fraction above which a step is evidence: fixed until the run has a baseline
        if len(baseline) >= c.min_baseline:
            allowance = baseline.median() + c.noise_k * max(tail_sigma(baseline.values, upper=True), c.min_sigma)
        evidence = frac - allowance if wait.max >= c.min_wait_s else 0.0
        long = self._long_stall(wait.max, median_step)
        state.cusum.update(step, evidence, event_time(wait_row))
        lane_index, lane = state.cusum.leading()
        if evidence <= 0 and not long:
            baseline.add(frac)
        event = self.events.get_open(self.kind, job)
        if event is None:
            if long:
                state.start, state.start_time = step, event_time(wait_row)
                self._raise(job, step, wait_row, median_step, allowance, "long_stall", None)
            elif lane.ratio >= 1.0:
                self._raise(job, step, wait_row, median_step, allowance, "cusum", (lane_index, lane.ratio))
            return
        if evidence <= 0 and not long:
            if state.cusum.calm(c.clear_steps):
                self.clear(job, step=step)
            return
        state.cusum.stir()
        self._raise(job, step, wait_row, median_step, allowance, "long_stall" if long else "cusum",
                    (lane_index, lane.ratio))

    def _long_stall(self, wait_s: float, median_step: float) -> bool:
        c = self.config
        return wait_s >= c.stall_min_s and wait_s >= c.stall_steps * median_step

    def _judge_late(self, row: Row) -> None:
        """A late delta: only a long stall is judged, against the job's recent median step time."""
        job, wait = row.key.job, row.summary
        steps = self._step_p50.get(job)
        median_step = steps.median() if steps else math.nan
        if not (median_step > 0 and wait.count and math.isfinite(wait.max)) or not self._long_stall(wait.max,
                                                                                                    median_step):
            return
        state = self._job(job)
        state.cusum.stir()  # not a judged step (late): it opens or updates the event, and keeps it from closing
        if not self.is_open(job):
            state.start, state.start_time = row.key.index, event_time(row)
        self._raise(job, row.key.index, row, median_step, self.config.noise_k * self.config.min_sigma, "long_stall",
                    None)

    def _raise(self, job: str, step: int, wait_row: Row, median_step: float, allowance: float, rule: str,
               lane: tuple[int, float] | None) -> None:
        c, wait, state = self.config, wait_row.summary, self._jobs[job]
        slowest = wait.argmax
        if slowest is None:
            return  # no value to name a rank by (both callers judge only windows with a finite one)
        frac = wait.max / median_step
        cut = max(allowance * median_step, c.min_wait_s)
        ranks = distinct(wait.top(), lambda v: v > cut, c.top) or [slowest]
        event = self.events.get_open(self.kind, job)
        if event is not None:  # the ranks named accumulate: a long stall's rank stays named after it
            ranks += [r for r in event.ranks if r not in ranks]
        detail: dict[str, Any] = {
            "summary": f"rank {ranks[0]} waited {wait.max:.3g} s for data in a {median_step:.3g} s step "
                       f"({frac:.0%})",
            "fraction": fnum(frac, 4), "threshold": fnum(allowance, 4), "wait_max_s": fnum(wait.max),
            "wait_mean_s": fnum(wait.mean), "step_time_p50_s": fnum(median_step),
            "mean_fraction": fnum(wait.mean / median_step, 4), "rule": rule,
            "top": [[fnum(v), r] for v, r in wait.top(c.top)],
        }
        if lane is not None:
            detail["lane"] = lane_name(lane[0], len(c.lanes))
            detail["score_ratio"] = fnum(lane[1], 3)
        if event is not None:
            detail.update({name: event.detail.get(name) for name in ("detected_step", "onset_step", "delay_steps",
                                                                     "opened_by")})
            self.raise_(job, step=step, ranks=ranks, detail=detail, severity=c.severity)
            return
        detail["detected_step"], detail["opened_by"] = step, rule
        if rule == "long_stall":
            onset, time = step, state.start_time
        else:
            leading = state.cusum.leading()[1]
            onset = leading.since if leading.since is not None else step
            time = leading.since_time
        detail["onset_step"] = onset
        detail["delay_steps"] = step - onset
        self.raise_(job, step=onset, ranks=ranks, detail=detail, severity=c.severity, time=time)
