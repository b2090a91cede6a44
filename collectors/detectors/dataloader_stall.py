"""Data-loader stall: ranks waiting on their input pipeline for a large fraction of the step.

Pairs each step's `dataloader_wait` and `step_time` windows (whichever is finalised second triggers
the check). The fraction is the worst rank's wait over the median step time (in a synchronous job
one rank waiting on data holds every rank back). A step is stalled when the fraction is above
`fraction` (default 0.25) and, once the run has a baseline (its median fraction over the last
`baseline_steps` normal steps), above `baseline_factor` x that baseline too, and the wait is at least
`min_wait_s` (3 ms: shorter waits are the host's scheduling and the SDK's own thread holding the GIL,
not an input pipeline; bench/detection.py saw 3-step bursts of 1.2-1.8 ms in 4 ms steps of clean
runs, and its slow loaders waited 4.9 ms and more); raised after
`consecutive` stalled steps, closed after `clear_steps` normal ones. Names the ranks whose wait is
above the threshold (top-k); while the event is open the ranks named accumulate.

One long stall is raised at once: a wait of at least `stall_steps` median step times and `stall_min_s`
seconds (a loader blocked for seconds is not noise, and waiting for `consecutive` more would wait for
more stalls). That wait often reaches the root as a late delta: with the README's loop the wait before
step s is logged while step s - 1 is current, and a rank whose loader blocks has already closed s - 1,
so the value arrives after the window was finalised. Late deltas of `dataloader_wait` are therefore
judged by this rule (against the job's recent median step time), and only by it.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

from collectors.common.rows import Row
from collectors.detectors.base import Baseline, distinct, event_time, fnum, p50
from collectors.detectors.streak import StreakDetector, StreakState
from telemetry.summary import Summary


@dataclass
class DataloaderStallConfig:
    enabled: bool = True
    metric: str = "dataloader_wait"
    step_metric: str = "step_time"
    fraction: float = 0.25
    consecutive: int = 3
    clear_steps: int = 2
    baseline_steps: int = 50
    baseline_factor: float = 2.0
    min_baseline: int = 5
    stall_steps: float = 20.0
    stall_min_s: float = 1.0
    min_wait_s: float = 0.003
    top: int = 5
    severity: str = "warning"


class DataloaderStallDetector(StreakDetector[StreakState]):
    kind = "dataloader_stall"

    def __init__(self, events, context=None,
                 config: DataloaderStallConfig | None = None) -> None:
        self.config = config or DataloaderStallConfig()
        super().__init__(events, context, self.config.baseline_steps)
        self.metrics = frozenset({self.config.metric, self.config.step_metric})
        self._pending: dict[str, OrderedDict[int, dict[str, Row]]] = {}
        self._step_p50: dict[str, Baseline] = {}

    def new_state(self) -> StreakState:
        return StreakState()

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
        state = self.state(job)
        if step <= state.last_step or not wait.count or not step_time.count:
            return
        state.last_step = step
        median_step = p50(step_time)
        if not (median_step > 0 and math.isfinite(wait.max)):
            return
        frac = wait.max / median_step
        baseline = self.baseline(job)
        threshold = c.fraction
        if len(baseline) >= c.min_baseline:
            threshold = max(c.fraction, c.baseline_factor * baseline.median())
        long = self._long_stall(wait.max, median_step)
        if (frac <= threshold or wait.max < c.min_wait_s) and not long:
            baseline.add(frac)
            self.normal(job, state, step, c.clear_steps)
            return
        self.over(state, step, event_time(wait_row))
        if not self.due(job, state, 1 if long else c.consecutive):
            return
        self._raise(job, step, wait_row, median_step, threshold, "long_stall" if long else "sustained")

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
        state = self.state(job)
        state.clean = 0  # not a streak's step (late): it opens or updates the event, and keeps it from closing
        if not self.is_open(job):
            state.start, state.start_time = row.key.index, event_time(row)
        self._raise(job, row.key.index, row, median_step, self.config.fraction, "long_stall")

    def _raise(self, job: str, step: int, wait_row: Row, median_step: float, threshold: float, rule: str) -> None:
        c, wait, state = self.config, wait_row.summary, self._state[job]
        slowest = wait.argmax
        if slowest is None:
            return  # no value to name a rank by (both callers judge only windows with a finite one)
        frac = wait.max / median_step
        cut = max(threshold * median_step, c.min_wait_s)
        ranks = distinct(wait.top(), lambda v: v > cut, c.top) or [slowest]
        event = self.events.get_open(self.kind, job)
        if event is not None:  # the ranks named accumulate: a long stall's rank stays named after it
            ranks += [r for r in event.ranks if r not in ranks]
        detail = {
            "summary": f"rank {ranks[0]} waited {wait.max:.3g} s for data in a {median_step:.3g} s step "
                       f"({frac:.0%})",
            "fraction": fnum(frac, 4), "threshold": fnum(threshold, 4), "wait_max_s": fnum(wait.max),
            "wait_mean_s": fnum(wait.mean), "step_time_p50_s": fnum(median_step),
            "mean_fraction": fnum(wait.mean / median_step, 4),
            "steps": state.streak, "rule": rule, "top": [[fnum(v), r] for v, r in wait.top(c.top)],
        }
        self.raise_streak(job, state, step, event, ranks=ranks, detail=detail, severity=c.severity)
