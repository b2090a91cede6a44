"""Non-finite: NaN or Inf in loss or grad_norm, naming the ranks (Summary.nonfinite_sources), in its step.

One event per job while steps keep going non-finite (each such step updates it, adding its ranks);
it closes once every watched metric that went non-finite has a later step without. Late deltas are
judged too: a rank whose NaN arrived after its step was finalised is still named.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from collectors.detectors.base import Detector, event_time
from collectors.root.store import Row


@dataclass
class NonfiniteConfig:
    enabled: bool = True
    metrics: list[str] = field(default_factory=lambda: ["loss", "grad_norm"])
    severity: str = "critical"


class NonfiniteDetector(Detector):
    kind = "nonfinite"

    def __init__(self, events, context=None, config: NonfiniteConfig | None = None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(events, context)
        self.config = config or NonfiniteConfig()
        self.metrics = frozenset(self.config.metrics)
        self._bad: dict[str, dict[str, int]] = {}  # job -> metric -> last non-finite step

    def observe(self, row: Row) -> None:
        if not row.key.is_step:
            return
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
        while len(steps) > 32:  # keep the detail small on a long NaN streak
            steps.pop(min(steps, key=int))
        all_ranks = sorted({r for e in steps.values() for m in e.values() for r in m["ranks"]})
        metrics = sorted({m for e in steps.values() for m in e})
        detail.update({
            "summary": f"non-finite {', '.join(metrics)} at step {step} from ranks {ranks[:8]}",
            "steps": steps, "metrics": metrics, "first_step": min(map(int, steps)), "last_step": step,
        })
        self.raise_(job, step=step, ranks=all_ranks, detail=detail,
                    severity=self.config.severity, time=event_time(row))
