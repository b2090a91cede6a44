"""Loss spike: the step's loss far above where the run's own recent loss says it should be.

Per finalised `loss` window the job's loss is the mean over ranks. The trailing window holds the last
`window_max` normal steps (spikes are kept out of it). Two rules:

- robust rule, judged once the window holds `warmup` steps: the expected loss is a Theil-Sen line through
  the last `recent` steps, one step on (robust to a falling loss and to the odd wild step; never below the
  lowest of the last 5 steps, so a line extrapolating a decay that is flattening out does not expect too
  little), and sigma the robust spread (1.4826 x MAD) of the residuals around it. A spike needs both
  loss > expected + k x sigma (it stands out of the noise) and loss > expected x (1 + min_rise) (it is a
  real rise, not a jump out of a nearly noiseless flat line); neither alone fires, and a loss below its
  expectation never does;
- factor-of-max rule (Megatron's spiky-loss check), judged from `window_min` steps: loss > factor x the
  window's max.

k and min_rise are set from bench/detection.py's figures on real torchrun jobs (docs/detectors.md).
One event per spike (consecutive spike steps update it; the ranks named accumulate); it closes on the
first normal step. A spike that lasts `rebaseline_after` steps is a new level, not a spike: the window
restarts from it and the event closes saying so. The ranks named are those whose loss stands out of the
step (above the step's median by more than the mean rose); none when every rank spiked together
(`broad`). Whether grad_norm spiked with it (same rules against grad_norm's own window, on the step's
max) is reported as `grad_norm_spiked`: true, false, or null until grad_norm's window for that step has
been finalised.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

from collectors.common.rows import Row
from collectors.detectors.base import Baseline, Detector, distinct, event_time, fnum, p50

RECENT_FLOOR = 5  # the expectation is never below the lowest of this many latest normal steps


@dataclass
class LossSpikeConfig:
    enabled: bool = True
    metric: str = "loss"
    grad_metric: str = "grad_norm"
    window_min: int = 4
    warmup: int = 8
    window_max: int = 50
    recent: int = 20
    k: float = 15.0
    min_rise: float = 0.2
    factor: float = 10.0
    rebaseline_after: int = 20
    top: int = 5
    severity: str = "warning"


@dataclass
class _Judged:
    spike: bool
    rule: str
    threshold: float
    expected: float
    sigma: float


def _judge(value: float, window: Baseline, c: LossSpikeConfig) -> _Judged:
    """Is value a spike against the window, by which rule, and the figures it was judged on."""
    if len(window) < c.window_min or not math.isfinite(value):
        return _Judged(False, "", math.nan, math.nan, math.nan)
    rules = []
    threshold = expected = sigma = math.nan
    if len(window) >= c.warmup:
        line, sigma = window.robust_line(c.recent)
        expected = max(line, min(list(window.values)[-RECENT_FLOOR:]))
        threshold = max(expected + c.k * sigma, expected + abs(expected) * c.min_rise)
        if value > threshold:
            rules.append("sigma")
    top = window.max()
    if top > 0 and value > c.factor * top:
        rules.append("factor_of_max")
    return _Judged(bool(rules), "+".join(rules), threshold, expected, sigma)


@dataclass
class _Grad:
    spiked: bool | None
    value: float
    threshold: float


class LossSpikeDetector(Detector):
    kind = "loss_spike"

    def __init__(self, events, context=None, config: LossSpikeConfig | None = None) -> None:
        super().__init__(events, context)
        self.config = config or LossSpikeConfig()
        self.metrics = frozenset({self.config.metric, self.config.grad_metric})
        self._loss: dict[str, Baseline] = {}
        self._grad: dict[str, Baseline] = {}
        self._grad_steps: dict[str, OrderedDict[int, _Grad]] = {}
        self._last: dict[tuple[str, str], int] = {}
        self._spike_run: dict[str, list[float]] = {}

    def observe(self, row: Row) -> None:
        if row.late or not row.key.is_step:
            return
        job, metric, step = row.key.job, row.key.metric, row.key.index
        if step <= self._last.get((job, metric), -1):
            return
        self._last[(job, metric)] = step
        if metric == self.config.grad_metric:
            self._observe_grad(row)
        else:
            self._observe_loss(row)

    def _observe_grad(self, row: Row) -> None:
        c, job, step, s = self.config, row.key.job, row.key.index, row.summary
        window = self._grad.setdefault(job, Baseline(c.window_max))
        value = s.max if s.count else math.nan
        judged = _judge(value, window, c)
        if math.isfinite(value) and not judged.spike:
            window.add(value)
        known = len(window) >= c.warmup or judged.spike
        steps = self._grad_steps.setdefault(job, OrderedDict())
        steps[step] = _Grad(judged.spike if known else None, value, judged.threshold)
        while len(steps) > 256:
            steps.popitem(last=False)
        event = self.events.get_open(self.kind, job)
        if event is not None and event.step is not None and event.step <= step <= (event.last_step or step):
            detail = dict(event.detail)
            self._grad_detail(detail, job, event.step, event.last_step or step)
            self.events.raise_(self.kind, job, step=None, ranks=event.ranks, hosts=event.hosts, detail=detail,
                               severity=event.severity)

    def _grad_detail(self, detail: dict, job: str, first: int, last: int) -> None:
        # the steps kept (at most 256), not range(first, last + 1): step numbers are the sender's (uint64),
        # and a gap like 5 -> 2**52 inside one event would loop for ever
        steps = self._grad_steps.get(job)
        seen = [] if steps is None else [g for s, g in steps.items() if first <= s <= last]
        if not seen:
            detail.setdefault("grad_norm_spiked", None)
            return
        flags = [g.spiked for g in seen]
        detail["grad_norm_spiked"] = True if any(flags) else (None if None in flags else False)
        peak = max(seen, key=lambda g: g.value if math.isfinite(g.value) else -math.inf)
        detail["grad_norm"] = fnum(peak.value)
        detail["grad_norm_threshold"] = fnum(peak.threshold)

    def _observe_loss(self, row: Row) -> None:
        c, job, step, s = self.config, row.key.job, row.key.index, row.summary
        window = self._loss.setdefault(job, Baseline(c.window_max))
        value = s.mean
        if not math.isfinite(value):
            return
        judged = _judge(value, window, c)
        if not judged.spike:
            window.add(value)
            self._spike_run.pop(job, None)
            if self.is_open(job):
                self.clear(job, step=step)
            return
        run = self._spike_run.setdefault(job, [])
        run.append(value)
        if len(run) >= c.rebaseline_after:
            window.reset(run[-c.window_max:])
            self._spike_run.pop(job, None)
            self.events.clear(self.kind, job, step=step, detail={"level_shift": True})
            return
        median = p50(s)
        expected = judged.expected if math.isfinite(judged.expected) else window.median()
        rise = value - expected
        ranks = distinct(s.top(), lambda v: v > median + rise, c.top)
        event = self.events.get_open(self.kind, job)
        first = event.step if event is not None and event.step is not None else step
        peak = max(value, event.detail.get("loss_peak") or value) if event is not None else value
        named = sorted(set(ranks) | set(event.ranks if event is not None else ()))
        robust_z = rise / judged.sigma if judged.sigma > 0 else None
        detail = {
            "summary": f"loss {value:.4g} vs expected {expected:.4g} (+{rise / abs(expected):.0%}"
                       f"{f', robust z {robust_z:.1f}' if robust_z is not None else ''}; {judged.rule})"
                       if expected else f"loss {value:.4g} ({judged.rule})",
            "loss": fnum(value), "loss_peak": fnum(peak), "expected": fnum(expected),
            "baseline_mean": fnum(window.mean()), "baseline_median": fnum(window.median()),
            "baseline_sigma": fnum(judged.sigma), "robust_z": fnum(robust_z, 2) if robust_z is not None else None,
            "relative_rise": fnum(rise / abs(expected), 4) if expected else None,
            "threshold": fnum(judged.threshold), "factor_threshold": fnum(c.factor * window.max()),
            "rule": judged.rule, "window": len(window), "max": fnum(s.max), "argmax": s.argmax, "min": fnum(s.min),
            "broad": not named, "steps": step - first + 1,
        }
        self._grad_detail(detail, job, first, step)
        self.raise_(job, step=step, ranks=named, detail=detail, severity=c.severity, time=event_time(row))
