"""What the root's history becomes in a Prometheus-compatible long-term store (remote-write; docs/metrics.md).

The root's /metrics shows the *latest* step of each live job; remote-write sends *every* step, each sample
stamped with the end of its window, so a store keeps the whole run. The families are distinct from the
scraped ones (a Prometheus may both scrape the root and receive its writes):

    telemetry_step_figure{job, attempt, metric, stat}     stat: count, mean, min, max, p50, p90, p99
    telemetry_step_argmax_rank{job, attempt, metric}      the rank of the max (a value, never a label)
    telemetry_step_argmin_rank{job, attempt, metric}
    telemetry_step_index{job, attempt}                    the step number, at its end: joins a time to a step
    telemetry_hardware_figure{job, attempt, metric, stat} 1 s hardware buckets (stat: count, mean, min, max,
                                                          and sum for counters' _delta metrics), any job name
    telemetry_hardware_argmax_rank{job, attempt, metric}
    telemetry_job_events_total{job, attempt, kind}        events opened, at each opening
    telemetry_job_goodput_ratio{job}                      goodput (docs/restarts.md), at the job's latest step end
    telemetry_job_goodput_seconds{job, kind}              kind: productive, lost, restart_downtime
    telemetry_job_restarts{job}

A step window's timestamp is its summary's `last_time_ns` (the latest time any rank logged that metric at
that step); a time bucket's is its end. Ranks are values, never labels, so a series' cardinality is bounded
by jobs x metrics (which the root caps per job). Every series carries the external labels given
(`--remote-write-label`), e.g. the cluster, so that several roots can write to one store.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from collectors.common.attempts import split
from collectors.common.rows import Row
from collectors.root.goodput import Goodput
from collectors.root.metrics import hardware_family
from collectors.root.prompb import Labels

Sample = tuple[Labels, int, float]  # (sorted labels with __name__, timestamp ms, value)

STEP_FIGURE = "telemetry_step_figure"
STEP_ARGMAX = "telemetry_step_argmax_rank"
STEP_ARGMIN = "telemetry_step_argmin_rank"
STEP_INDEX = "telemetry_step_index"
HARDWARE_FIGURE = "telemetry_hardware_figure"
HARDWARE_ARGMAX = "telemetry_hardware_argmax_rank"
EVENTS_TOTAL = "telemetry_job_events_total"
GOODPUT_RATIO = "telemetry_job_goodput_ratio"
GOODPUT_SECONDS = "telemetry_job_goodput_seconds"
RESTARTS = "telemetry_job_restarts"
STEP_STATS = ("count", "mean", "min", "max", "p50", "p90", "p99")
RESERVED_LABELS = frozenset({"__name__", "job", "attempt", "metric", "stat", "kind"})
MAX_JOBS_REMEMBERED = 10_000  # jobs whose latest step index is kept (for telemetry_step_index)


def labels(name: str, external: Labels, **pairs: str) -> Labels:
    """The sorted label set of one series (the remote-write spec requires labels sorted by name)."""
    return tuple(sorted((("__name__", name), *external, *pairs.items())))


class SeriesMaker:
    """Turns finalised rows, events and goodput figures into samples. Not thread-safe: one caller at a time
    (the finaliser's commits come one after the other)."""

    def __init__(self, external: Labels = ()) -> None:
        self.external = external
        self._last_step: OrderedDict[str, int] = OrderedDict()  # scoped job -> latest step index sent

    def rows(self, rows: list[Row]) -> list[Sample]:
        """Samples of the rows of one commit: step windows and hardware buckets (late deltas are not rows
        here: the caller skips them, a store cannot amend a sample it holds)."""
        out: list[Sample] = []
        for row in rows:
            if row.key.is_step:
                self._step(row, out)
            elif hardware_family(row.key.metric) is not None:
                self._hardware(row, out)
        return out

    def _step(self, row: Row, out: list[Sample]) -> None:
        job, attempt = split(row.key.job)
        metric, s = row.key.metric, row.summary
        ts = s.last_time_ns // 1_000_000
        ids = {"job": job, "attempt": str(attempt), "metric": metric}
        if s.count:
            p50, p90, p99 = s.quantiles([0.5, 0.9, 0.99])
            figures = {"count": float(s.count), "mean": s.mean, "min": s.min, "max": s.max,
                       "p50": p50, "p90": p90, "p99": p99}
        else:
            figures = {"count": 0.0}
        for stat, value in figures.items():
            out.append((labels(STEP_FIGURE, self.external, stat=stat, **ids), ts, float(value)))
        for name, rank in ((STEP_ARGMAX, s.argmax if s.count else None), (STEP_ARGMIN, s.argmin if s.count else None)):
            if rank is not None:
                out.append((labels(name, self.external, **ids), ts, float(rank)))
        step = row.key.index
        if step > self._last_step.get(row.key.job, -1):
            self._last_step[row.key.job] = step
            self._last_step.move_to_end(row.key.job)
            while len(self._last_step) > MAX_JOBS_REMEMBERED:
                self._last_step.popitem(last=False)
            out.append((labels(STEP_INDEX, self.external, job=job, attempt=str(attempt)), ts, float(step)))

    def _hardware(self, row: Row, out: list[Sample]) -> None:
        job, attempt = split(row.key.job)
        metric, s = row.key.metric, row.summary
        ts = row.key.index + row.key.width_ms  # the bucket's end
        ids = {"job": job, "attempt": str(attempt), "metric": metric}
        figures = {"count": float(s.count)}
        if s.count:
            figures.update(mean=s.mean, min=s.min, max=s.max)
            if metric.endswith("_delta"):
                figures["sum"] = s.sum
        for stat, value in figures.items():
            out.append((labels(HARDWARE_FIGURE, self.external, stat=stat, **ids), ts, float(value)))
        if s.count and s.argmax is not None:
            out.append((labels(HARDWARE_ARGMAX, self.external, **ids), ts, float(s.argmax)))

    def event_opened(self, scoped_job: str, kind: str, time_s: float, total: int) -> list[Sample]:
        job, attempt = split(scoped_job)
        return [(labels(EVENTS_TOTAL, self.external, job=job, attempt=str(attempt), kind=kind),
                 int(time_s * 1000), float(total))]

    def goodput(self, figures: Goodput) -> list[Sample]:
        """The goodput figures of a job (by its name, all attempts), at its latest step's end."""
        attempts = figures["attempts"]
        if not attempts:
            return []
        ts = max(a["end_ns"] for a in attempts) // 1_000_000
        job = figures["job"]
        out: list[Sample] = []
        if figures["goodput"] is not None and math.isfinite(figures["goodput"]):
            out.append((labels(GOODPUT_RATIO, self.external, job=job), ts, float(figures["goodput"])))
        for kind, value in (("productive", figures["productive_s"]), ("lost", figures["lost_s"]),
                            ("restart_downtime", figures["restart_downtime_s"])):
            out.append((labels(GOODPUT_SECONDS, self.external, job=job, kind=kind), ts, float(value)))
        out.append((labels(RESTARTS, self.external, job=job), ts, float(figures["restarts"])))
        return out

    def forget(self, scoped_job: str) -> None:
        self._last_step.pop(scoped_job, None)
