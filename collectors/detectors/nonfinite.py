"""Non-finite: NaN or Inf in loss or grad_norm, naming the rank(s) where it first appeared.

One event per job while steps keep going non-finite (each such step updates it); it closes once every
watched metric that went non-finite has a later step without. The ranks named are the origin's, not every
rank it spread to: under a synchronous all-reduce one rank's NaN is every rank's from the next step on
(and its grad_norm is every rank's in the same step, reduced after the bad backward). So the event names
the ranks non-finite at its earliest step (Summary.nonfinite_sources), leaving out a metric whose ranks
there strictly contain another metric's (grad_norm on every rank, loss on one: the spread, not a second
origin); `ranks_affected` in the detail lists every rank seen non-finite. Late deltas are judged too: a
rank whose NaN arrived after its step was finalised is still named, and a late delta for an earlier step
becomes the origin.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from collectors.common.rows import Row
from collectors.detectors.base import Detector, event_time


@dataclass
class NonfiniteConfig:
    enabled: bool = True
    metrics: list[str] = field(default_factory=lambda: ["loss", "grad_norm"])
    severity: str = "critical"


class NonfiniteDetector(Detector):
    kind = "nonfinite"

    def __init__(self, events, context=None, config: NonfiniteConfig | None = None) -> None:
        super().__init__(events, context)
        self.config = config or NonfiniteConfig()
        self.metrics = frozenset(self.config.metrics)
        self._bad: dict[str, dict[str, int]] = {}  # job -> metric -> last non-finite step
        self._first_step: dict[str, int] = {}  # job -> latest step of metrics[0] (loss) judged
        self._held: dict[str, dict[int, list[Row]]] = {}  # job -> step -> non-finite rows awaiting its loss

    def _order(self, metric: str) -> tuple[int, str]:
        metrics = self.config.metrics
        return (metrics.index(metric) if metric in metrics else len(metrics), metric)

    def observe(self, row: Row) -> None:
        """A later metric's (grad_norm's) non-finite window waits for the first metric's (loss's) window of
        its step, in a job that logs that metric: the root may hand grad_norm's window over first, and its
        NaN on every rank (the all-reduce's spread) must not open the event naming them all. It is judged
        as soon as that window, or any window of a later step of the job, arrives."""
        if not row.key.is_step:
            return
        job, metric, step = row.key.job, row.key.metric, row.key.index
        first = self.config.metrics[0] if self.config.metrics else metric
        held = self._held.get(job)
        if held:
            for early in sorted(s for s in held if s < step):
                for waiting in held.pop(early):
                    self._judge(waiting)
        if (metric != first and not row.late and row.summary.nonfinite_count and job in self._first_step
                and self._first_step[job] < step):
            rows = self._held.setdefault(job, {}).setdefault(step, [])
            if len(rows) < len(self.config.metrics):
                rows.append(row)
            return
        if metric == first and not row.late:
            self._first_step[job] = max(step, self._first_step.get(job, step))
        self._judge(row)
        if held and metric == first and step in held:
            for waiting in held.pop(step):
                self._judge(waiting)

    def _judge(self, row: Row) -> None:
        job, metric, step, s = row.key.job, row.key.metric, row.key.index, row.summary
        bad = self._bad.setdefault(job, {})
        if s.nonfinite_count == 0:
            if row.late:
                return
            if metric in bad and step > bad[metric]:
                del bad[metric]
                if not bad and self.is_open(job):
                    self.clear(job, step=step)
            return
        bad[metric] = max(bad.get(metric, step), step)
        ranks = list(s.nonfinite_sources)
        event = self.events.get_open(self.kind, job)
        detail = dict(event.detail) if event is not None else {"steps": {}}
        steps = dict(detail.get("steps", {}))
        entry = dict(steps.get(str(step), {}))
        entry[metric] = {"count": s.nonfinite_count, "ranks": ranks[:64]}
        steps[str(step)] = entry
        while len(steps) > 32:  # keep the detail small on a long NaN streak, and its earliest step (the origin)
            steps.pop(sorted(steps, key=int)[1])
        origin_step = min(steps, key=int)
        origin = steps[origin_step]
        sets = {m: frozenset(e["ranks"]) for m, e in origin.items()}
        # a metric whose ranks strictly contain another's at that step is the spread (grad_norm reduced
        # after one rank's NaN loss), not a second origin
        kept = [m for m in sorted(sets, key=self._order) if not any(o and o < sets[m] for o in sets.values())]
        origin_ranks = sorted(set().union(*(sets[m] for m in kept)))
        affected = sorted({*detail.get("ranks_affected", ()), *ranks[:64]})
        metrics = sorted({*detail.get("metrics", ()), metric})
        last = max(step, detail.get("last_step", step))
        detail.update({
            "summary": f"non-finite {', '.join(kept)} at step {origin_step} from ranks {origin_ranks[:8]}"
                       + (f" (spread to {len(affected)} ranks by step {last})" if affected != origin_ranks else ""),
            "steps": steps, "metrics": metrics, "first_step": int(origin_step), "last_step": last,
            "origin_step": int(origin_step), "origin_metrics": kept, "origin_ranks": origin_ranks[:64],
            "ranks_affected": affected[:64],
        })
        self.raise_(job, step=step, ranks=origin_ranks, detail=detail,
                    severity=self.config.severity, time=event_time(row))
