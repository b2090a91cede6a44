"""Loss spike: the step's loss far above the run's own recent loss.

Per finalised `loss` window the job's loss is the mean over ranks. With at least `window_min` earlier
steps in the trailing window (at most `window_max`, spikes kept out of it), the step is a spike when

- sigma rule: loss > mean + k x sigma of the window, and loss > mean x (1 + min_rise) (so a flat,
  almost noiseless loss does not turn rounding into spikes); or
- factor-of-max rule (Megatron's spiky-loss check): loss > factor x the window's max.

One event per spike (consecutive spike steps update it); it closes on the first normal step. A spike
that lasts `rebaseline_after` steps is a new level, not a spike: the window restarts from it and the
event closes saying so. The ranks named are those whose loss stands out of the step (above the step's
median by more than the mean rose); none when every rank spiked together (`broad`). Whether grad_norm
spiked with it (same rules against grad_norm's own window, on the step's max) is reported as
`grad_norm_spiked`: true, false, or null until grad_norm's window for that step has been finalised.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

from collectors.detectors.base import Baseline, Detector, distinct, event_time, fnum, p50
from collectors.root.store import Row


@dataclass
class LossSpikeConfig:
    enabled: bool = True
    metric: str = "loss"
    grad_metric: str = "grad_norm"
    window_min: int = 4
    window_max: int = 50
    k: float = 3.0
    min_rise: float = 0.05
    factor: float = 10.0
    rebaseline_after: int = 20
    top: int = 5
    severity: str = "warning"


def _spike(value: float, window: Baseline, c: LossSpikeConfig) -> tuple[bool, str, float]:
    """(is spike, rule, threshold) of value against the window."""
    if len(window) < c.window_min or not math.isfinite(value):
        return False, "", math.nan
    mu, sd, top = window.mean(), window.stdev(), window.max()
    line, line_sd = window.trend()
    # The more sensitive of the window's mean and its line (a falling loss), each above a minimum rise.
    threshold = min(max(mu + c.k * sd, mu + abs(mu) * c.min_rise),
                    max(line + c.k * line_sd, line + abs(line) * c.min_rise))
    rules = []
    if value > threshold:
        rules.append("sigma")
    if top > 0 and value > c.factor * top:
        rules.append("factor_of_max")
    return bool(rules), "+".join(rules), threshold


@dataclass
class _Grad:
    spiked: bool | None
    value: float
    threshold: float


class LossSpikeDetector(Detector):
    kind = "loss_spike"

    def __init__(self, events, context=None, config: LossSpikeConfig | None = None) -> None:  # type: ignore[no-untyped-def]
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
        spiked, _, threshold = _spike(value, window, c)
        if math.isfinite(value) and not spiked:
            window.add(value)
        known = len(window) >= c.window_min or spiked
        steps = self._grad_steps.setdefault(job, OrderedDict())
        steps[step] = _Grad(spiked if known else None, value, threshold)
        while len(steps) > 256:
            steps.popitem(last=False)
        event = self.events.get_open(self.kind, job)
        if event is not None and event.step is not None and event.step <= step <= (event.last_step or step):
            detail = dict(event.detail)
            self._grad_detail(detail, job, event.step, event.last_step or step)
            self.events.raise_(self.kind, job, step=None, ranks=event.ranks, hosts=event.hosts, detail=detail,
                               severity=event.severity)

    def _grad_detail(self, detail: dict, job: str, first: int, last: int) -> None:
        steps = self._grad_steps.get(job, {})
        seen = [steps[s] for s in range(first, last + 1) if s in steps]
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
        spiked, rule, threshold = _spike(value, window, c)
        if not spiked:
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
        mu, sd, median = window.mean(), window.stdev(), p50(s)
        expected = min(mu, window.trend()[0])
        rise = value - expected
        ranks = distinct(s.top(), lambda v: v > median + rise, c.top)
        event = self.events.get_open(self.kind, job)
        first = event.step if event is not None and event.step is not None else step
        peak = max(value, event.detail.get("loss_peak") or value) if event is not None else value
        detail = {
            "summary": f"loss {value:.4g} vs expected {expected:.4g} (trailing mean {mu:.4g}, sigma {sd:.3g}; {rule})",
            "loss": fnum(value), "loss_peak": fnum(peak), "expected": fnum(expected), "baseline_mean": fnum(mu),
            "baseline_sigma": fnum(sd),
            "threshold": fnum(threshold), "factor_threshold": fnum(c.factor * window.max()), "rule": rule,
            "window": len(window), "max": fnum(s.max), "argmax": s.argmax, "min": fnum(s.min),
            "broad": not ranks, "steps": step - first + 1,
        }
        self._grad_detail(detail, job, first, step)
        self.raise_(job, step=step, ranks=ranks, detail=detail, severity=c.severity, time=event_time(row))
