"""Straggler: the rank that makes the others wait, for K consecutive steps.

Two signals, per job:

* `collective_arrival` (logged by the SDK from the flight recorder under torch.distributed: seconds
  from a rank's entry into `run.step` to its last collective in the step). In a job whose ranks
  synchronise through collectives every rank's wall `step_time` is the slowest rank's, so step_time
  cannot name it; the last rank to arrive can. Per step with both windows: wait = max - p50 of the
  arrivals (what the median rank waits for the last one), and ratio = p50(step_time) /
  (p50(step_time) - wait), how much longer the step is than it would be without that wait; it is
  judged like the step-time ratio below. Used for a job once its first `collective_arrival` window is
  seen.
* otherwise `step_time` (jobs without collectives):

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
    arrival_metric: str = "collective_arrival"
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
        self.metrics = frozenset({self.config.metric, self.config.arrival_metric})
        self._state: dict[str, _State] = {}
        self._baseline: dict[tuple[str, bool], Baseline] = {}
        self._arrivals: set[str] = set()  # jobs that log collective_arrival
        self._pending: dict[str, dict[int, dict[str, Row]]] = {}  # job -> step -> metric -> row

    def forget(self, job: str) -> None:
        super().forget(job)
        self._arrivals.discard(job)
        self._pending.pop(job, None)

    def observe(self, row: Row) -> None:
        if row.late or not row.key.is_step:
            return
        c, job = self.config, row.key.job
        metric = row.key.metric
        if metric == c.arrival_metric:
            self._arrivals.add(job)
        if job not in self._arrivals:
            if metric == c.metric:
                self._judge_step_time(row)
            return
        # Both windows of a step are needed; they may come in either order.
        pending = self._pending.setdefault(job, {})
        rows = pending.setdefault(row.key.index, {})
        rows[metric] = row
        if len(pending) > 16:
            for old in sorted(pending)[:-16]:
                del pending[old]
        if c.metric in rows and c.arrival_metric in rows:
            del pending[row.key.index]
            self._judge_arrival(rows[c.metric], rows[c.arrival_metric])

    def _judge_arrival(self, steps_row: Row, row: Row) -> None:
        c, job, step, s = self.config, row.key.job, row.key.index, row.summary
        state = self._state.setdefault(job, _State())
        if step <= state.last_step or s.count < 2:
            return
        state.last_step = step
        step_p50 = p50(steps_row.summary)
        median = p50(s)
        if not (step_p50 > 0 and math.isfinite(s.max) and math.isfinite(median)):
            return
        wait_s = max(0.0, s.max - median)
        ratio = step_p50 / max(step_p50 - wait_s, 0.05 * step_p50)
        baseline = self._baseline.setdefault((job, True), Baseline(c.baseline_steps))
        threshold = c.factor
        if len(baseline) >= c.min_baseline:
            threshold = max(c.factor, c.baseline_factor * baseline.median())
        # A rank is named when its own lag behind the median rank alone makes the step `threshold` x longer.
        cut = median + step_p50 * (1.0 - 1.0 / threshold)

        def detail(ranks: list[int]) -> dict:
            return {
                "summary": f"rank {ranks[0]} reaches the step's last collective {wait_s:.3g} s after the median "
                           f"rank: ranks wait {wait_s:.3g} s per step ({ratio:.2f}x the step without it)",
                "signal": c.arrival_metric,
                "ratio": fnum(ratio, 4), "threshold": fnum(threshold, 4), "p50_s": fnum(median),
                "max_s": fnum(s.max), "step_time_p50_s": fnum(step_p50), "slowest_rank": s.argmax,
                "top": [[fnum(v), r] for v, r in s.top(c.top)],
            }

        self._decide(row, state, baseline, ratio, threshold, wait_s, max(0.0, s.count * s.max - s.sum),
                     lambda: distinct(s.top(), lambda v: v > cut, c.top) or [s.argmax], detail)

    def _judge_step_time(self, row: Row) -> None:
        c, job, step, s = self.config, row.key.job, row.key.index, row.summary
        state = self._state.setdefault(job, _State())
        if step <= state.last_step or s.count < 2:
            return
        state.last_step = step
        median = p50(s)
        if not (median > 0 and math.isfinite(s.max)):
            return
        ratio = s.max / median
        baseline = self._baseline.setdefault((job, False), Baseline(c.baseline_steps))
        threshold = c.factor
        if len(baseline) >= c.min_baseline:
            threshold = max(c.factor, c.baseline_factor * baseline.median())
        cut = threshold * median

        def detail(ranks: list[int]) -> dict:
            return {
                "summary": f"rank {ranks[0]} at {s.max:.3g} s vs median {median:.3g} s ({ratio:.2f}x); "
                           f"ranks wait {wait_s:.3g} s per step",
                "signal": c.metric,
                "ratio": fnum(ratio, 4), "threshold": fnum(threshold, 4), "p50_s": fnum(median),
                "max_s": fnum(s.max), "slowest_rank": s.argmax,
                "top": [[fnum(v), r] for v, r in s.top(c.top)],
            }

        wait_s = s.max - median
        self._decide(row, state, baseline, ratio, threshold, wait_s, max(0.0, s.count * s.max - s.sum),
                     lambda: distinct(s.top(), lambda v: v > cut, c.top) or [s.argmax], detail)

    def _decide(self, row: Row, state: _State, baseline: Baseline, ratio: float, threshold: float, wait_s: float,
                wait_rank_s: float, ranks_of, detail_of) -> None:  # type: ignore[no-untyped-def]
        c, job, step = self.config, row.key.job, row.key.index
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
        state.wait_s_total += wait_s
        state.wait_rank_s_total += wait_rank_s
        state.steps += 1
        if state.streak < c.consecutive and not self.is_open(job):
            return
        ranks = ranks_of()
        open_event = self.events.get_open(self.kind, job)
        detail = detail_of(ranks)
        detail.update({
            "wait_s": fnum(wait_s), "wait_rank_s": fnum(wait_rank_s),
            "wait_s_total": fnum(state.wait_s_total), "wait_rank_s_total": fnum(state.wait_rank_s_total),
            "steps": state.steps, "detected_step": open_event.detail.get("detected_step") if open_event else step,
            "baseline_ratio": fnum(baseline.median(), 4) if len(baseline) else None,
        })
        self.raise_(job, step=state.streak_start if open_event is None else step, ranks=ranks, detail=detail,
                    severity=c.severity, time=state.streak_time)
